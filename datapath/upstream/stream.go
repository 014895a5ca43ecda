package upstream

import (
	"bufio"
	"errors"
	"io"

	"github.com/infergate/infergate/datapath/sockio"
)

// Why: an SSE relay that reads the body, writes the event and comes back
// to read again starts every wait with a read that finds the socket empty
// (Go's poller forgets readiness when a read starts). Stream runs the
// relay from inside the engine socket's read wait instead
// (sockio.Conn.ReadEach): one read(2) per event, the wait after it trusted.

// StreamSink takes a body's bytes from Stream.
type StreamSink interface {
	// Buffer returns a buffer for the next read, lent until Idle.
	Buffer() []byte
	// Idle says the buffer is not needed until the next Buffer (the
	// stream is about to wait for the engine, or Stream returns).
	Idle()
	// Emit takes body bytes (in Buffer's buffer) and when they were read:
	// the clock reading of the epoll loop that read them, made once for
	// its batch (sockio.EachState.ReadAt), or sockio.NoDeadline (read
	// the clock if the time is needed). It may block (the relay's
	// backpressure: the engine is not read meanwhile). An error ends
	// Stream, which returns it.
	Emit(p []byte, at sockio.Mono) error
}

// ClientSink is a StreamSink whose Emit writes only to one client
// connection, inside that connection's Hold step (Client; nil: not so).
// Stream then reads from an epoll loop shared by many streams instead of
// waking the caller per read; a client write that would block is kept
// and finished by the caller, so the loop never waits on one client.
type ClientSink interface {
	StreamSink
	Client() *sockio.Conn
}

// Streamer is implemented by response bodies that can hand their bytes to
// a StreamSink from inside the engine socket's read wait.
type Streamer interface {
	// Stream relays the body to s until it ends (nil; the connection goes
	// back to the pool as after a Read to the end), s.Emit fails (its
	// error) or the engine's side fails (the read error, matching
	// os.ErrDeadlineExceeded for the read deadline or an abort;
	// io.ErrUnexpectedEOF for a body cut short). It must be the body's
	// first read. ok is false when it cannot run (a TLS connection, not
	// Linux, a body without bytes): nothing was read, Read is the way.
	// Close the body afterwards, as after reads.
	Stream(s StreamSink) (ok bool, err error)
}

var _ Streamer = (*body)(nil)

// Stream implements Streamer.
func (b *body) Stream(s StreamSink) (bool, error) {
	pc := b.pc
	if b.done || pc.tls || !pc.sock.CanReadEach() {
		return false, nil
	}
	st := bodyStream{s: s}
	switch r := b.r.(type) {
	case *chunkedBody:
		st.d.kind = frameChunked
	case *lengthBody:
		st.d.kind, st.d.left = frameLength, uint64(r.n)
	case *bufio.Reader:
		st.d.kind = frameClose
	default:
		return false, nil // http.NoBody
	}
	// The bytes that came in with the head first (no socket call).
	for pc.br.Buffered() > 0 && !st.ended {
		p := s.Buffer()
		n, _ := pc.br.Read(p)
		if more, err := st.Handle(p[:n]); !more && err != nil {
			s.Idle()
			return true, err
		}
	}
	s.Idle()
	var err error
	if !st.ended {
		// The read buffer is empty and not used until the body ends.
		b.c.parkReader(pc)
		if cs, ok := s.(ClientSink); ok && b.c.useLoops {
			if st.each.Client = cs.Client(); st.each.Client != nil {
				st.each.Loops = &b.c.loops
				// The loop's set alone has the socket meanwhile.
				st.each.Detach = true
			}
		}
		err = pc.sock.ReadEach(&st, &b.c.hup, &st.each)
		// pc goes on without a read buffer: its next exchange borrows one.
	}
	switch {
	case st.ended:
		b.reuse = b.reuse && st.extra == 0 // bytes past the answer: out of sync
		b.finish(true)
		return true, nil
	case errors.Is(err, io.EOF):
		if st.d.complete() {
			b.finish(true)
			return true, nil
		}
		return true, io.ErrUnexpectedEOF
	}
	return true, err
}

// bodyStream is Stream's sockio.ReadHandler: it decodes the framing and
// emits the body bytes.
type bodyStream struct {
	each  sockio.EachState // ReadEach's, first: a wake-up reads it, then s and d
	s     StreamSink
	d     frameDecoder
	ended bool // the body's end was decoded
	extra int  // bytes read past it
}

func (st *bodyStream) Buffer() []byte { return st.s.Buffer() }
func (st *bodyStream) Idle()          { st.s.Idle() }

// Handle decodes p and emits its body bytes; false at the body's end (nil
// error), on a framing error or when Emit fails.
func (st *bodyStream) Handle(p []byte) (bool, error) {
	data, done, extra, err := st.d.decode(p)
	if len(data) > 0 { // before a framing error too: the events before it are whole
		if err := st.s.Emit(data, st.each.ReadAt()); err != nil {
			return false, err
		}
	}
	if err != nil {
		return false, err
	}
	if done {
		st.ended, st.extra = true, extra
		return false, nil
	}
	return true, nil
}
