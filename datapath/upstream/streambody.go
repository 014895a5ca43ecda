package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http/httputil"
	"strconv"
	"sync"
	"time"
)

// Why stream: a request body the rule does not route on (an audio upload,
// a pass-through path) is copied to the engine as it arrives, one buffer at
// a time, so memory stays flat in the body's size. It cannot be replayed,
// which costs nothing: only a dial failure is retried, and nothing past the
// first chunk is read from the client before the dial succeeded.
//
// Why the first chunk is read before dialing: an HTTP/2 stream reaches the
// handler when its HEADERS arrive, before any DATA. Dialing then would let
// a client hold one engine connection per stream by opening streams and
// never sending their bodies. The engine is dialed once the request is
// complete enough to be worth sending: its first body bytes (or its end)
// have arrived, within the client's usual body read deadline.

// streamChunk is the copy buffer of a streamed request body.
const streamChunk = 32 << 10

// streamBufs recycles streamChunk buffers across requests.
var streamBufs = sync.Pool{New: func() any { b := make([]byte, streamChunk); return &b }}

// BodyStream is a client request body sent through as it arrives (Leg.Stream).
type BodyStream struct {
	R io.Reader
	// N is the client's Content-Length; -1 (unknown) is sent chunked.
	N int64
	// Max caps the bytes read (over → *ClientBodyError with TooLarge); 0
	// is no cap.
	Max int64
	// Idle bounds each write to the engine (the deadline moves forward per
	// chunk, so a long upload is bounded by silence, not by its size).
	Idle time.Duration
	// Progress is told after each chunk read from the client (the listener
	// moves the client's read deadline forward); may be nil. An interface
	// rather than a func, so the caller's own body state can implement it
	// without a method value allocated per request.
	Progress ChunkReader

	sent   int64
	primed bool   // the first read ran (prime)
	head   []byte // what it returned, written before anything else
	// headBuf backs head; back to primeBufs once head is copied out.
	headBuf *[]byte
	eof     bool // and the body ended there
	// probe is whole's read of the body's end (a field: a local array
	// handed to R.Read would be allocated per request).
	probe [1]byte
}

// ChunkReader is told each time a chunk of a streamed body was read from
// the client (BodyStream.Progress).
type ChunkReader interface{ ChunkRead() }

// primeChunk is the size of the read prime makes before dialing: small,
// since streams waiting for their first bytes hold it.
const primeChunk = 4 << 10

// primeBufs recycles primeChunk buffers: every streamed body (the usual
// small POST on a rule that does not route on its body) takes one until
// its head is copied out for the engine.
var primeBufs = sync.Pool{New: func() any { b := make([]byte, primeChunk); return &b }}

// primeSmall is the prime buffer of a body whose Content-Length fits it (a
// short JSON request, such as most streamed completions): it holds the
// whole body until the engine's answer begins, so streams opened together
// (a burst of SSE requests) hold one each at once, and a quarter of a page
// each is 3 KB less per stream than a page.
const primeSmall = 1 << 10

var primeSmallBufs = sync.Pool{New: func() any { b := make([]byte, primeSmall); return &b }}

// primeBuf takes a prime buffer for a body of n bytes (-1: unknown).
func primeBuf(n int64) *[]byte {
	if n >= 0 && n <= primeSmall {
		return primeSmallBufs.Get().(*[]byte)
	}
	return primeBufs.Get().(*[]byte)
}

// putPrimeBuf returns a buffer primeBuf gave to its pool.
func putPrimeBuf(b *[]byte) {
	if cap(*b) == primeSmall {
		primeSmallBufs.Put(b)
		return
	}
	primeBufs.Put(b)
}

// prime reads the body's first bytes (or its end) before the engine is
// dialed; a retry after a failed dial reuses them. A read failure is a
// *ClientBodyError.
func (s *BodyStream) prime() error {
	if s.primed {
		return nil
	}
	s.primed = true
	s.headBuf = primeBuf(s.N)
	buf := *s.headBuf
	for {
		n, err := s.R.Read(buf)
		s.head = buf[:n]
		if err == io.EOF {
			s.eof = true
			return nil
		}
		if err != nil {
			return &ClientBodyError{Err: err}
		}
		if n > 0 {
			return nil
		}
	}
}

// whole returns the body when prime's read brought all of it (a sized
// body: the usual small POST on a rule that does not route on its body),
// after reading its end, so the client's side sees the body end as the
// copy loop would have shown it. Send then writes it as a buffered body,
// which may be written again; the head stays held until releaseHead.
func (s *BodyStream) whole() ([]byte, bool, error) {
	if s.N < 0 || int64(len(s.head)) != s.N || s.headBuf == nil {
		return nil, false, nil
	}
	if s.Max > 0 && s.N > s.Max {
		return nil, false, &ClientBodyError{TooLarge: true, Err: errStreamTooLarge}
	}
	if !s.eof {
		if s.Progress != nil {
			s.Progress.ChunkRead()
		}
		for tries := 0; ; tries++ {
			n, err := s.R.Read(s.probe[:])
			if n > 0 {
				return nil, false, &ClientBodyError{Err: fmt.Errorf("body longer than its %d bytes", s.N)}
			}
			if err == io.EOF {
				break
			}
			if err == nil && tries < 100 {
				continue // a reader may return nothing before the end
			}
			if err == nil {
				err = io.ErrNoProgress
			}
			return nil, false, &ClientBodyError{Err: err}
		}
		s.eof = true
	}
	s.sent = s.N
	return s.head, true, nil
}

// releaseHead returns the prime buffer once its bytes are copied out (a
// later attempt never reads head again: the body has moved on).
func (s *BodyStream) releaseHead() {
	if s.headBuf != nil {
		putPrimeBuf(s.headBuf)
		s.headBuf, s.head = nil, nil
	}
}

// Sent is how many body bytes were written to the engine (the endpoint's
// byte counter).
func (s *BodyStream) Sent() int64 { return s.sent }

var errStreamTooLarge = errors.New("request body over the streaming limit")

// writeStreamed writes the head and copies s to the engine connection.
// leg.HeaderWait (> 0) bounds the response head wait from the body's end.
// ctx's end stops the copy (its AfterFunc has cut the connection; the
// per-chunk deadline must not revive it).
func writeStreamed(ctx context.Context, pc *conn, w *reqWriter, method string, leg *Leg, s *BodyStream) error {
	writeHead(w, pc.hostLine, method, leg)
	if s.N >= 0 {
		w.WriteString(headerContentLength + ": ")
		w.Write(strconv.AppendInt(w.AvailableBuffer(), s.N, 10)) // no scratch to escape
		w.WriteString("\r\n\r\n")
	} else {
		w.WriteString(headerTE + ": chunked\r\n\r\n")
	}
	var dst io.Writer = w
	var cw io.WriteCloser
	if s.N < 0 {
		cw = httputil.NewChunkedWriter(w)
		dst = cw
	}
	bp := streamBufs.Get().(*[]byte)
	defer streamBufs.Put(bp)
	buf := *bp
	var total int64
	for first := true; ; first = false {
		var n int
		var rerr error
		if first && s.primed {
			n = copy(buf, s.head) // primeChunk fits in streamChunk
			s.releaseHead()
			if s.eof {
				rerr = io.EOF
			}
		} else {
			n, rerr = s.R.Read(buf)
		}
		if n > 0 {
			total += int64(n)
			s.sent = total
			if s.Max > 0 && total > s.Max {
				return &ClientBodyError{TooLarge: true, Err: errStreamTooLarge}
			}
			if s.Progress != nil {
				s.Progress.ChunkRead()
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if s.Idle > 0 {
				_ = pc.sock.SetWriteDeadline(time.Now().Add(s.Idle))
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return err
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return &ClientBodyError{Err: rerr}
		}
	}
	if s.N >= 0 && total != s.N {
		return &ClientBodyError{Err: fmt.Errorf("body ended after %d of %d bytes", total, s.N)}
	}
	if cw != nil {
		if err := cw.Close(); err != nil { // the 0-length last chunk
			return err
		}
		w.WriteString("\r\n") // no trailers
	}
	// The body has ended: the engine's first byte is due within HeaderWait
	// from now, and the flush below may wait for it (flushAwait).
	var dl time.Time
	if leg.HeaderWait > 0 {
		dl = time.Now().Add(leg.HeaderWait)
	}
	_ = pc.sock.SetReadDeadline(dl)
	if err := flushAwait(w, pc); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	_ = pc.sock.SetWriteDeadline(dl) // the read side has dl from before the flush
	return nil
}
