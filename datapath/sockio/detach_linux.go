//go:build linux

package sockio

import (
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Why detach: a socket Go's poller holds stays in the runtime's epoll set
// (edge-triggered, in, out and hang-up) for as long as it is open, and Go
// offers no way to take it out but closing it. A stream relayed from a
// loop is then registered twice, and each event is reported twice: once to
// the runtime's set, where no goroutine waits for it but its netpoll still
// collects it (and polls the socket again to do so), and once to the
// loop's set, whose own readiness the runtime's set reports as well. For
// the looped part the stream's socket is moved to a second descriptor of
// its own (a dup: closing one of two descriptors sends no FIN), the
// net.Conn is closed (the runtime's close takes the socket out of its
// set), and only the loop's set has it; when the stream leaves the loop
// the descriptor is handed back to the poller as an *os.File under a
// net.Conn of ours, which the pool reuses as before. Five system calls a
// stream (dup, the runtime's epoll_ctl and close; the file's fcntl and
// epoll_ctl) against one epoll report fewer per event.
//
// Registrations made under the old descriptor in other epoll sets (a
// pooled connection's hang-up watcher) stay in their sets until the socket
// closes, keyed by the old number: they report the same socket's hang-up
// to the same watcher entry, so they stay true.

// detachable reports whether c's socket can leave the runtime's poller
// for a loop: nc is the socket itself (a wrapper around it would keep
// the closed one).
func (c *Conn) detachable() bool {
	switch c.nc.(type) {
	case *net.TCPConn, *fdConn:
		return c.raw != nil
	}
	return false
}

// detach moves c's socket to a descriptor of its own and closes the
// net.Conn that held it (out of the runtime's poller); false, with c
// unchanged, when it cannot. Only c's owner calls it, and until reattach
// only Abort may run on c from elsewhere.
func (c *Conn) detach() (uintptr, bool) {
	if !c.detachable() {
		return 0, false
	}
	var dup int
	var err error
	if cerr := c.raw.Control(func(fd uintptr) { dup, err = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); cerr != nil || err != nil {
		return 0, false
	}
	_ = c.nc.Close() // the socket stays open under dup: no FIN
	return uintptr(dup), true
}

// reattach gives fd, which detach returned, back to the poller as c's
// socket, with the deadlines asked for (and Abort's, if it ran). On an
// error fd is closed and c keeps the closed net.Conn.
func (c *Conn) reattach(fd uintptr) error {
	f := os.NewFile(fd, "tcp")
	// A file the poller could not take reports no deadlines: its reads
	// would block a thread.
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		_ = f.Close()
		return fmt.Errorf("sockio: socket back to the poller: %w", err)
	}
	raw, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return fmt.Errorf("sockio: socket back to the poller: %w", err)
	}
	nc := &fdConn{File: f, local: c.nc.LocalAddr(), remote: c.nc.RemoteAddr()}
	c.ncMu.Lock()
	c.nc, c.raw = nc, raw
	c.ncMu.Unlock()
	c.armed, c.armedWrite = NoDeadline, NoDeadline
	if c.want != NoDeadline {
		_ = c.arm(c.want)
	}
	if c.wantWrite != NoDeadline {
		_ = c.armWrite(c.wantWrite)
	}
	if c.aborted.Load() { // an Abort that set the closed one's deadline
		_ = nc.SetDeadline(aLongTimeAgo)
	}
	return nil
}
