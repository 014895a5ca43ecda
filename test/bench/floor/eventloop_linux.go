//go:build linux

package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// loopProxy is design (b): the same framing and the same kept-alive
// engine connection per client connection as goProxy, driven by one epoll
// loop per CPU, each with its own listening socket (SO_REUSEPORT) and its
// connections' client and engine sockets. Sockets are non-blocking and
// registered once, edge-triggered, as nginx registers them; a loop's
// goroutine waits only when its loop has nothing to do (on the netpoller,
// or in epoll_wait for loop-block).
type loopProxy struct {
	loops  []*loop
	addr   string
	wg     sync.WaitGroup
	errMu  sync.Mutex
	runErr error
}

// startLoops listens on listen (port 0: one the kernel picks, shared by
// every loop) and runs n loops proxying to engine. netpoll: Go's netpoller
// waits on each loop's epoll set (runNetpoll), else the loop blocks in
// epoll_wait.
func startLoops(listen, engine string, n, bufLen int, netpoll bool) (*loopProxy, error) {
	lsa, err := sockaddr(listen)
	if err != nil {
		return nil, err
	}
	p := &loopProxy{}
	for i := 0; i < n; i++ {
		// A loop's own engine address: unix.Connect writes into it.
		esa, err := sockaddr(engine)
		if err != nil {
			p.stop()
			return nil, err
		}
		l, err := newLoop(lsa, esa, bufLen, netpoll)
		if err != nil {
			p.stop()
			return nil, err
		}
		if i == 0 {
			// Every loop binds the port the first one got.
			sa, err := unix.Getsockname(l.lfd)
			if err != nil {
				l.closeAll()
				return nil, fmt.Errorf("floor: getsockname: %w", err)
			}
			lsa = sa
			p.addr = addrString(sa)
		}
		p.loops = append(p.loops, l)
	}
	for _, l := range p.loops {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			if err := l.run(); err != nil {
				p.errMu.Lock()
				p.runErr = errors.Join(p.runErr, err)
				p.errMu.Unlock()
			}
		}()
	}
	return p, nil
}

// stop ends every loop and closes its sockets; it returns what a loop
// failed on.
func (p *loopProxy) stop() error {
	for _, l := range p.loops {
		_, _ = unix.Write(l.wake, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	}
	p.wg.Wait()
	for _, l := range p.loops {
		l.closeAll()
	}
	p.errMu.Lock()
	defer p.errMu.Unlock()
	return p.runErr
}

// loop owns one epoll set and every connection accepted on its listener.
type loop struct {
	epfd, lfd, wake int
	epf             *os.File // epfd, when Go's netpoller waits on it (it closes epfd)
	engine          unix.Sockaddr
	bufLen          int
	byFD            []*lconn // a connection under its client's and its engine socket's descriptors
	events          [128]unix.EpollEvent
}

// lconn is one client connection and its engine connection (efd -1 until
// the first request).
type lconn struct {
	cfd, efd   int
	connecting bool // the engine connect is under way
	inResp     bool // the request went on whole; the answer is being relayed
	// What each socket can do without waiting, as the last edge or call
	// left it (edge-triggered: cleared only by a short read or EAGAIN).
	cRead, cWrite, eRead, eWrite bool
	req, resp                    *pipe
}

func newLoop(lsa, esa unix.Sockaddr, bufLen int, netpoll bool) (*loop, error) {
	l := &loop{epfd: -1, lfd: -1, wake: -1, engine: esa, bufLen: bufLen}
	var err error
	if l.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return nil, fmt.Errorf("floor: epoll_create: %w", err)
	}
	if netpoll {
		// Non-blocking, so os.NewFile registers it with the netpoller.
		if err := unix.SetNonblock(l.epfd, true); err != nil {
			l.closeAll()
			return nil, fmt.Errorf("floor: epoll set non-blocking: %w", err)
		}
		l.epf = os.NewFile(uintptr(l.epfd), "epoll")
	}
	if l.wake, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		l.closeAll()
		return nil, fmt.Errorf("floor: eventfd: %w", err)
	}
	if l.lfd, err = listenReusePort(lsa); err != nil {
		l.closeAll()
		return nil, err
	}
	for _, fd := range []int{l.lfd, l.wake} {
		if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
			l.closeAll()
			return nil, fmt.Errorf("floor: epoll_ctl: %w", err)
		}
	}
	return l, nil
}

func listenReusePort(sa unix.Sockaddr) (int, error) {
	fd, err := unix.Socket(family(sa), unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("floor: socket: %w", err)
	}
	for _, o := range []int{unix.SO_REUSEADDR, unix.SO_REUSEPORT} {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, o, 1); err != nil {
			_ = unix.Close(fd)
			return -1, fmt.Errorf("floor: setsockopt: %w", err)
		}
	}
	if err := unix.Bind(fd, sa); err != nil {
		_ = unix.Close(fd)
		return -1, fmt.Errorf("floor: bind %s: %w", addrString(sa), err)
	}
	if err := unix.Listen(fd, 4096); err != nil {
		_ = unix.Close(fd)
		return -1, fmt.Errorf("floor: listen: %w", err)
	}
	return fd, nil
}

// run waits and dispatches until stop wakes it (stop closes the sockets
// once every loop has returned).
func (l *loop) run() error {
	if l.epf != nil {
		return l.runNetpoll()
	}
	for {
		n, err := unix.EpollWait(l.epfd, l.events[:], -1)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return fmt.Errorf("floor: epoll_wait: %w", err)
		}
		if l.dispatch(n) {
			return nil
		}
	}
}

// runNetpoll is run with Go's netpoller doing the waiting: the loop's
// epoll set is itself a descriptor Go polls, so when the set is empty the
// loop's goroutine parks (once per batch, not per connection) and no
// thread sits in epoll_wait. A thread blocked in a system call keeps the
// runtime's monitor thread waking (its sleep starts at 20 µs) to hand its
// processor on; this way there is none.
func (l *loop) runNetpoll() error {
	rc, err := l.epf.SyscallConn()
	if err != nil {
		return fmt.Errorf("floor: epoll raw conn: %w", err)
	}
	var failed error
	err = rc.Read(func(uintptr) bool {
		for {
			// epoll_pwait with no wait: the readiness wait is the netpoller's.
			r, _, errno := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(l.epfd),
				uintptr(unsafe.Pointer(&l.events[0])), uintptr(len(l.events)), 0, 0, 0)
			switch {
			case errno == unix.EINTR:
				continue
			case errno != 0:
				failed = fmt.Errorf("floor: epoll_wait: %w", errno)
				return true
			case r == 0:
				return false
			}
			if l.dispatch(int(r)) {
				return true
			}
			if int(r) < len(l.events) {
				return false // the set's next edge ends the wait
			}
		}
	})
	if err != nil {
		return fmt.Errorf("floor: epoll wait: %w", err)
	}
	return failed
}

// dispatch handles the first n events; true: stop woke the loop.
func (l *loop) dispatch(n int) bool {
	for i := 0; i < n; i++ {
		ev := l.events[i]
		fd := int(ev.Fd)
		switch {
		case fd == l.wake:
			return true
		case fd == l.lfd:
			l.accept()
		case fd < len(l.byFD) && l.byFD[fd] != nil:
			l.ready(l.byFD[fd], fd, ev.Events)
		}
	}
	return false
}

const edge = unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET

func (l *loop) accept() {
	for {
		fd, _, err := unix.Accept4(l.lfd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		if err != nil {
			return // EAGAIN, or a connection reset before accept: the next edge retries
		}
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		c := &lconn{cfd: fd, efd: -1, cRead: true, cWrite: true,
			req: newPipe(l.bufLen, false), resp: newPipe(l.bufLen, true)}
		if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: edge, Fd: int32(fd)}); err != nil {
			_ = unix.Close(fd)
			continue
		}
		l.track(fd, c)
		l.step(c)
	}
}

// ready records what an edge says socket fd of c can do and moves c on.
func (l *loop) ready(c *lconn, fd int, ev uint32) {
	in := ev&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0
	out := ev&(unix.EPOLLOUT|unix.EPOLLHUP|unix.EPOLLERR) != 0
	if fd == c.cfd {
		c.cRead, c.cWrite = c.cRead || in, c.cWrite || out
	} else {
		if c.connecting && out {
			c.connecting = false
			if e, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR); err != nil || e != 0 {
				l.drop(c)
				return
			}
		}
		c.eRead, c.eWrite = c.eRead || in, c.eWrite || out
	}
	l.step(c)
}

// step moves c as far as its sockets allow without waiting, and drops it
// on an error or a close.
func (l *loop) step(c *lconn) {
	if err := l.pump(c); err != nil {
		l.drop(c)
	}
}

// pump is goProxy.netConn's loop turned inside out: each wait there is a
// return here, resumed by the next edge. A stale edge (one for a socket a
// step already drained) costs one read that finds nothing.
func (l *loop) pump(c *lconn) error {
	for {
		// The request goes client → engine, its answer engine → client;
		// one pass moves whichever is under way.
		q, src, dst, canRead, canWrite := c.req, c.cfd, c.efd, &c.cRead, &c.eWrite
		if c.inResp {
			q, src, dst, canRead, canWrite = c.resp, c.efd, c.cfd, &c.eRead, &c.cWrite
		}
		done, err := q.walk()
		if err != nil {
			return err
		}
		if out := q.out(); len(out) > 0 {
			if dst < 0 { // the engine, before a request's first bytes
				if err := l.dial(c); err != nil {
					return err
				}
				dst = c.efd
			}
			if c.connecting || !*canWrite {
				return nil
			}
			n, err := sockWrite(dst, out, canWrite)
			if err != nil {
				return err
			}
			q.wrote(n)
			continue
		}
		if done {
			if !c.inResp {
				c.resp.f.next(c.req.f.isHead)
			} else {
				closeEngine, err := answered(c.req, c.resp)
				if closeEngine {
					l.closeEngine(c)
				}
				if err != nil {
					return err
				}
			}
			c.inResp = !c.inResp
			continue
		}
		if !*canRead {
			return nil
		}
		if err := sockRead(src, q, canRead); err != nil {
			return err
		}
	}
}

// sockRead reads once from fd into q; a short read or EAGAIN clears
// *can (the socket is drained: the next edge says when it is not).
func sockRead(fd int, q *pipe, can *bool) error {
	st, err := readPipe(uintptr(fd), q)
	*can = st == readFull
	return err
}

// sockWrite writes what fd takes of p now; a full socket clears *can.
func sockWrite(fd int, p []byte, can *bool) (int, error) {
	n, blocked, err := writeSome(uintptr(fd), p)
	*can = !blocked
	return n, err
}

// dial starts c's engine connection (non-blocking: it may still be under
// way when dial returns).
func (l *loop) dial(c *lconn) error {
	fd, err := unix.Socket(family(l.engine), unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("floor: socket: %w", err)
	}
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	switch err := unix.Connect(fd, l.engine); {
	case err == nil:
		c.eWrite = true
	case errors.Is(err, unix.EINPROGRESS):
		c.connecting = true
	default:
		_ = unix.Close(fd)
		return fmt.Errorf("floor: connect engine: %w", err)
	}
	if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: edge, Fd: int32(fd)}); err != nil {
		_ = unix.Close(fd)
		return fmt.Errorf("floor: epoll_ctl: %w", err)
	}
	c.efd, c.eRead = fd, false
	l.track(fd, c)
	return nil
}

func (l *loop) track(fd int, c *lconn) {
	for fd >= len(l.byFD) {
		l.byFD = append(l.byFD, make([]*lconn, len(l.byFD)+64)...)
	}
	l.byFD[fd] = c
}

// closeEngine closes c's engine connection; the next request dials anew.
func (l *loop) closeEngine(c *lconn) {
	if c.efd < 0 {
		return
	}
	l.byFD[c.efd] = nil
	_ = unix.Close(c.efd) // closing the only descriptor leaves the epoll set too
	c.efd, c.connecting, c.eRead, c.eWrite = -1, false, false, false
}

func (l *loop) drop(c *lconn) {
	l.closeEngine(c)
	if c.cfd >= 0 {
		l.byFD[c.cfd] = nil
		_ = unix.Close(c.cfd)
		c.cfd = -1
	}
}

func (l *loop) closeAll() {
	for _, c := range l.byFD {
		if c != nil {
			l.drop(c)
		}
	}
	for _, fd := range []int{l.lfd, l.wake} {
		if fd >= 0 {
			_ = unix.Close(fd)
		}
	}
	if l.epf != nil {
		_ = l.epf.Close()
	} else if l.epfd >= 0 {
		_ = unix.Close(l.epfd)
	}
}

// sockaddr resolves host:port (an IP literal) for the raw socket calls.
func sockaddr(hostport string) (unix.Sockaddr, error) {
	ap, err := net.ResolveTCPAddr("tcp", hostport)
	if err != nil {
		return nil, fmt.Errorf("floor: address %q: %w", hostport, err)
	}
	if ip4 := ap.IP.To4(); ip4 != nil || ap.IP == nil {
		sa := &unix.SockaddrInet4{Port: ap.Port}
		copy(sa.Addr[:], ip4)
		return sa, nil
	}
	sa := &unix.SockaddrInet6{Port: ap.Port}
	copy(sa.Addr[:], ap.IP.To16())
	return sa, nil
}

func family(sa unix.Sockaddr) int {
	if _, ok := sa.(*unix.SockaddrInet6); ok {
		return unix.AF_INET6
	}
	return unix.AF_INET
}

func addrString(sa unix.Sockaddr) string {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return net.JoinHostPort(net.IP(a.Addr[:]).String(), strconv.Itoa(a.Port))
	case *unix.SockaddrInet6:
		return net.JoinHostPort(net.IP(a.Addr[:]).String(), strconv.Itoa(a.Port))
	}
	return ""
}
