package datapath

import (
	"errors"
	"net/http"
	"time"

	"github.com/infergate/infergate/datapath/pick"
	"github.com/infergate/infergate/datapath/respclock"
	"github.com/infergate/infergate/datapath/sockio"
	"github.com/infergate/infergate/datapath/streambound"
	"github.com/infergate/infergate/datapath/upstream"
)

// sseStream is the SSE relay run from inside the engine socket's read
// wait (upstream.Streamer): each read's events are written and flushed to
// the client there, and the wait that follows needs no read to start it.
// A client write that blocks holds the engine's reads back (the engine's
// socket fills and TCP pushes back on it) with one relay buffer in hand;
// between events the stream holds none (relayBuf, borrowed per read).
//
// What Emit needs per event it holds itself: the exchange's fields it would
// read instead (the client's writer, the first-token hook) sit on lines no
// other per-event work touches, and with 1,000 streams each was a cache
// miss per event (perf: most of Emit's own time was the load of x.placed).
// For the same reason the fields an event reads fill the struct's first
// two cache lines (Buffer, Idle and Emit's own; then the count, the
// clock's start and the bound's part NextAt reads), and the rest pads it to 256 bytes: a size
// class whose objects start on a line (at 200 bytes, in the 208 class, the
// same fields spanned three or four lines). TestSSEStreamLayout holds it.
type sseStream struct {
	rb      relayBuf
	placed  *pick.Placed      // x.placed until the first event
	clk     *respclock.Writer // x.w when it is the timing wrapper itself: written with Emit's clock reading
	fl      http.Flusher
	relayed uint64
	// start is the clock wrapper's Start as a sockio.Mono (NoDeadline:
	// no wrapper, or no Start): an event's reading is then the wrapper's
	// one clock read since Start, and the bound's now is start plus it.
	start sockio.Mono
	bound streambound.Bound // the idle bound and cap, engine reads and client writes alike (the relay's, copied in and back)

	x    *exchange
	w    http.ResponseWriter  // x.w
	ub   upstream.BoundedBody // nil: no read deadlines
	werr error                // the client write that failed
	_    [24]byte
}

// clientConner is the lean front end's response: the client connection,
// while the request is served inside its read wait.
type clientConner interface{ Conn() *sockio.Conn }

// Client implements upstream.ClientSink: the front end's connection when
// every write of Emit goes to it in its read wait's step (the relay
// buffer, the timing wrapper and the response's writer touch nothing
// another goroutine uses), else nil.
func (s *sseStream) Client() *sockio.Conn {
	w := s.w
	for range 8 {
		if cc, ok := w.(clientConner); ok {
			return cc.Conn()
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return nil
		}
		w = u.Unwrap()
	}
	return nil
}

// gone reports whether the stream ended because the client's side failed:
// a write of Emit's, or one kept from a loop and written later.
func (s *sseStream) gone(err error) bool {
	var cw *sockio.ClientWriteError
	return s.werr != nil || errors.As(err, &cw)
}

func (s *sseStream) Buffer() []byte { return s.rb.get() }
func (s *sseStream) Idle()          { s.rb.release() }

// Emit writes p to the client and moves the engine's idle bound, and the
// client write's, past it (when the ones in force end more than Idle/64
// before the idle bound from now: streambound's slack). at is when p was
// read (upstream.StreamSink).
func (s *sseStream) Emit(p []byte, at sockio.Mono) error {
	// One clock reading per event at most, and integers from it: the
	// bound's now and the wrapper's time since Start (no time.Time made
	// per event). The epoll loop that read p made one for its batch; a
	// read outside a loop brings none, and Emit reads the clock.
	now := at
	if now == sockio.NoDeadline {
		now = sockio.Now()
	}
	timed := s.start != sockio.NoDeadline
	if s.placed != nil {
		s.placed.FirstToken(time.Now()) // once a stream: its wall clock as before
		s.placed, s.x.placed = nil, nil
	}
	if d, moved := s.bound.NextAt(now); moved && s.ub != nil {
		s.ub.SetReadDeadline(d.Time())
	}
	s.relayed += uint64(len(p))
	var err error
	switch {
	case timed:
		_, err = s.clk.WriteIn(p, now.Sub(s.start))
	case s.clk != nil:
		_, err = s.clk.WriteAt(p, now.Time())
	default:
		_, err = s.w.Write(p)
	}
	if err != nil {
		s.werr = err
		return err
	}
	if s.fl != nil {
		s.fl.Flush()
	}
	return nil
}
