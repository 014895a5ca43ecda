package h1

import (
	"sync"
	"syscall"
	"time"
)

// Why a watcher: a client that goes away must cancel its request (the
// engine stops generating for nobody) even while nothing is written to it,
// e.g. while the engine computes a long prefill. net/http keeps a second
// goroutine reading every connection for that. Here one goroutine per
// server waits on an epoll set for the peer's FIN or RST (EPOLLRDHUP,
// EPOLLHUP, EPOLLERR) of the connections whose request has run longer than
// watchAfter; each connection is registered once, one-shot, and the
// registration goes with its socket when it closes.

// epollOneShot is EPOLLONESHOT (not exported by package syscall on every
// architecture).
const epollOneShot = 1 << 30

type watcher struct {
	srv      *Server
	epfd     int
	done     chan struct{}
	stopOnce sync.Once
	exited   chan struct{}
}

// newWatcher starts the server's watcher; nil when epoll is unavailable
// (then a client's departure is seen on the next write).
func newWatcher(s *Server) *watcher {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil
	}
	w := &watcher{srv: s, epfd: epfd, done: make(chan struct{}), exited: make(chan struct{})}
	go w.run()
	return w
}

func (w *watcher) stop() {
	if w == nil {
		return
	}
	w.stopOnce.Do(func() {
		close(w.done)
		<-w.exited
		_ = syscall.Close(w.epfd)
	})
}

func (w *watcher) run() {
	defer close(w.exited)
	var events [64]syscall.EpollEvent
	var due []*conn
	tick := int(watchAfter / time.Millisecond)
	for {
		select {
		case <-w.done:
			return
		default:
		}
		n, err := syscall.EpollWait(w.epfd, events[:], tick)
		if err != nil && err != syscall.EINTR {
			return
		}
		for i := 0; i < n; i++ {
			id := uint64(uint32(events[i].Fd)) | uint64(uint32(events[i].Pad))<<32
			if c := w.srv.lookup(id); c != nil {
				c.cancel() // the client is gone: its request's context ends
			}
		}
		due = w.due(due[:0])
		for _, c := range due {
			w.register(c)
		}
		clear(due)
	}
}

// due collects the connections whose request has run past watchAfter and
// that are not registered yet.
func (w *watcher) due(out []*conn) []*conn {
	limit := time.Now().Add(-watchAfter).UnixNano()
	s := w.srv
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		if c.watched {
			continue
		}
		if t := c.busySince.Load(); t != 0 && t <= limit {
			c.watched = true
			out = append(out, c)
		}
	}
	return out
}

// register adds c's socket to the epoll set. Control holds the descriptor
// open meanwhile, so a socket closed since cannot be confused with a new
// one that reused its number.
func (w *watcher) register(c *conn) {
	raw := rawConn(c.nc)
	if raw == nil {
		return
	}
	ev := syscall.EpollEvent{
		Events: syscall.EPOLLRDHUP | epollOneShot,
		Fd:     int32(uint32(c.id)),
		Pad:    int32(uint32(c.id >> 32)),
	}
	_ = raw.Control(func(fd uintptr) {
		_ = syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_ADD, int(fd), &ev)
	})
}
