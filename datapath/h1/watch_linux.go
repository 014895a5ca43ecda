package h1

import (
	"sync"
	"syscall"
	"time"

	"github.com/infergate/infergate/datapath/sockio"
)

// Why a watcher: a client that goes away must cancel its request (the
// engine stops generating for nobody) even while nothing is written to it,
// e.g. while the engine computes a long prefill. net/http keeps a second
// goroutine reading every connection for that. Here one goroutine waits on
// an epoll set for the peer's FIN or RST (EPOLLRDHUP, EPOLLHUP, EPOLLERR)
// of the connections whose request has run longer than watchAfter; each
// connection is registered once, one-shot, and the registration goes with
// its socket when it closes. One Watcher may serve many Servers (a
// gateway's every VIP), so idle listeners cost no wake-ups of their own.

// epollOneShot is EPOLLONESHOT (not exported by package syscall on every
// architecture).
const epollOneShot = 1 << 30

// Watcher cancels the requests of clients that went away, for the
// connections of every Server that uses it.
type Watcher struct {
	// ep is waited on through the netpoller (sockio.Epoll): a thread
	// blocked in epoll_wait kept the runtime's monitor thread waking.
	ep    *sockio.Epoll
	mu    sync.Mutex
	conns map[uint64]*conn // every open connection, by watcher id
	// unwatched is the connections of conns not registered yet, the ones
	// due looks at: a registered connection stays so while open, and
	// scanning every stream's connection each tick touched a cold line
	// of each (50 per second per stream; 1.9 % of the gateway's user time
	// relaying 1,000 SSE streams).
	unwatched map[uint64]*conn
	nextID    uint64
	exited    chan struct{}
	stopOnce  sync.Once
}

// NewWatcher starts a watcher; nil when epoll is unavailable (a client's
// departure is then seen on the next write). Close stops it.
func NewWatcher() *Watcher {
	ep, err := sockio.NewEpoll()
	if err != nil {
		return nil
	}
	w := &Watcher{ep: ep, conns: map[uint64]*conn{}, unwatched: map[uint64]*conn{}, exited: make(chan struct{})}
	go w.run()
	return w
}

// Close stops the watcher; connections still open are no longer watched.
func (w *Watcher) Close() {
	if w == nil {
		return
	}
	w.stopOnce.Do(func() {
		_ = w.ep.Close() // run's wait, this one or the next, fails at once
		<-w.exited
	})
}

// add gives c its watcher id.
func (w *Watcher) add(c *conn) {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.nextID++
	c.wid = w.nextID
	w.conns[c.wid] = c
	w.unwatched[c.wid] = c
	w.mu.Unlock()
}

func (w *Watcher) remove(c *conn) {
	if w == nil {
		return
	}
	w.mu.Lock()
	delete(w.conns, c.wid)
	delete(w.unwatched, c.wid)
	w.mu.Unlock()
}

func (w *Watcher) run() {
	defer close(w.exited)
	var events [64]syscall.EpollEvent
	var due []*conn
	for {
		// Wait fails once Close has closed the set (a deadline passed
		// is 0 events, no error): that is run's stop.
		n, err := w.ep.Wait(events[:], watchAfter)
		if err != nil {
			return
		}
		for i := 0; i < n; i++ {
			id := uint64(uint32(events[i].Fd)) | uint64(uint32(events[i].Pad))<<32
			w.mu.Lock()
			c := w.conns[id]
			w.mu.Unlock()
			if c != nil {
				c.ctx.end() // the client is gone: its request's context ends
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
func (w *Watcher) due(out []*conn) []*conn {
	limit := time.Now().Add(-watchAfter).UnixNano()
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, c := range w.unwatched {
		if t := c.busySince.Load(); t != 0 && t <= limit {
			delete(w.unwatched, id)
			out = append(out, c)
		}
	}
	return out
}

// register adds c's socket to the epoll set. Control holds the descriptor
// open meanwhile, so a socket closed since cannot be confused with a new
// one that reused its number.
func (w *Watcher) register(c *conn) {
	raw := rawConn(c.nc)
	if raw == nil {
		return
	}
	ev := syscall.EpollEvent{
		Events: syscall.EPOLLRDHUP | epollOneShot,
		Fd:     int32(uint32(c.wid)),
		Pad:    int32(uint32(c.wid >> 32)),
	}
	_ = raw.Control(func(fd uintptr) {
		_ = w.ep.Ctl(syscall.EPOLL_CTL_ADD, int(fd), &ev)
	})
}
