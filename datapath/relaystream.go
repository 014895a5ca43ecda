package datapath

import (
	"net/http"
	"time"

	"github.com/infergate/infergate/datapath/streambound"
	"github.com/infergate/infergate/datapath/upstream"
)

// sseStream is the SSE relay run from inside the engine socket's read
// wait (upstream.Streamer): each read's events are written and flushed to
// the client there, and the wait that follows needs no read to start it.
// A client write that blocks holds the engine's reads back (the engine's
// socket fills and TCP pushes back on it) with one relay buffer in hand;
// between events the stream holds none (relayBuf, borrowed per read).
type sseStream struct {
	x       *exchange
	fl      http.Flusher
	ub      upstream.BoundedBody // nil: no read deadlines
	bound   *streambound.Bound   // the idle bound and cap, engine reads and client writes alike
	rb      relayBuf
	relayed uint64
	werr    error // the client write that failed
}

func (s *sseStream) Buffer() []byte { return s.rb.get() }
func (s *sseStream) Idle()          { s.rb.release() }

// Emit writes p to the client and moves the engine's idle bound, and the
// client write's, past it (when they would end sooner than the idle bound
// from now: streambound's slack).
func (s *sseStream) Emit(p []byte) error {
	now := time.Now()
	if s.x.placed != nil {
		s.x.placed.FirstToken(now)
		s.x.placed = nil
	}
	if d, moved := s.bound.Next(now); moved && s.ub != nil {
		s.ub.SetReadDeadline(d)
	}
	s.relayed += uint64(len(p))
	if _, err := s.x.w.Write(p); err != nil {
		s.werr = err
		return err
	}
	if s.fl != nil {
		s.fl.Flush()
	}
	return nil
}
