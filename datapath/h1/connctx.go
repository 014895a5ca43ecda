package h1

import (
	"context"
	"sync"
	"sync/atomic"
)

// connCtx is a connection's context, shared by its requests: it ends when
// the client goes away or the connection closes. Besides context.Context
// it offers AfterDone, which the engine client registers its abort with on
// every exchange: context.AfterFunc would allocate a child context and a
// stop closure and insert into (then delete from) the parent's children
// map each time; AfterDone fills one of a few slots whose stop functions
// were bound when the connection opened.
type connCtx struct {
	context.Context // the cancelCtx: Done, Err, Value and Deadline
	cancel          context.CancelFunc

	// gone is set as end starts: isEnded reads it where Err would go
	// through the embedded interface to the cancelCtx, a line of its own
	// the connection's goroutine touches for nothing else per request.
	gone atomic.Bool

	mu    sync.Mutex
	ended bool // end ran: no slot is filled any more
	slots [afterDoneSlots]afterDoneSlot
}

// afterDoneSlots is how many AfterDone registrations a connection holds at
// once without falling back to context.AfterFunc: a request has one engine
// exchange in flight, two for the legs of a P/D request.
const afterDoneSlots = 2

type afterDoneSlot struct {
	x    *connCtx
	f    func() // nil: free
	stop func() bool
}

func newConnCtx(parent context.Context) *connCtx {
	x := &connCtx{}
	x.Context, x.cancel = context.WithCancel(parent)
	for i := range x.slots {
		s := &x.slots[i]
		s.x, s.stop = x, s.doStop
	}
	return x
}

// AfterDone is context.AfterFunc(x, f) without its allocations: f runs in
// its own goroutine once x has ended, unless stop ran first (it then
// returns true). Unlike context.AfterFunc's, stop must be called at most
// once: its slot may carry a later registration afterwards.
func (x *connCtx) AfterDone(f func()) (stop func() bool) {
	x.mu.Lock()
	if !x.ended {
		for i := range x.slots {
			if s := &x.slots[i]; s.f == nil {
				s.f = f
				x.mu.Unlock()
				return s.stop
			}
		}
	}
	x.mu.Unlock()
	// Ended already (f runs at once), or every slot is taken.
	return context.AfterFunc(x.Context, f)
}

// doStop is a slot's stop: true when it kept f from running.
func (s *afterDoneSlot) doStop() bool {
	x := s.x
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.ended || s.f == nil {
		return false
	}
	s.f = nil
	return true
}

// isEnded reports whether end has started: true whenever Err is not nil
// (the context ends only through end), and from just before.
func (x *connCtx) isEnded() bool { return x.gone.Load() }

// end cancels the context, then starts every registered function.
func (x *connCtx) end() {
	x.gone.Store(true)
	x.cancel()
	x.mu.Lock()
	if x.ended {
		x.mu.Unlock()
		return
	}
	x.ended = true
	var fs [afterDoneSlots]func()
	for i := range x.slots {
		fs[i] = x.slots[i].f
	}
	x.mu.Unlock()
	for _, f := range fs {
		if f != nil {
			go f()
		}
	}
}
