package datapath

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"strconv"
	"sync"
	"time"
)

// Why stream: a request body the rule does not route on (an audio upload,
// a pass-through path) is copied to the engine as it arrives, one buffer at
// a time, so memory stays flat in the body's size. It cannot be replayed,
// which costs nothing: only a dial failure is retried, and a dial happens
// before the first byte is read from the client.

// streamChunk is the copy buffer of a streamed request body.
const streamChunk = 32 << 10

// streamBufs recycles streamChunk buffers across requests.
var streamBufs = sync.Pool{New: func() any { b := make([]byte, streamChunk); return &b }}

// reqStream is a client request body sent through as it arrives.
type reqStream struct {
	r io.Reader
	// n is the client's Content-Length; -1 (unknown) is sent chunked.
	n int64
	// max caps the bytes read (over → *clientBodyError with tooLarge).
	max int64
	// idle bounds each write to the engine (the deadline moves forward per
	// chunk, so a long upload is bounded by silence, not by its size).
	idle time.Duration
	// progress runs after each chunk read from the client (the listener
	// moves the client's read deadline forward); may be nil.
	progress func()
	// sent counts the body bytes written to the engine (the endpoint's
	// byte counter).
	sent int64
}

// clientBodyError is a failure reading the client's body while streaming
// it: the client's fault (or the size cap), answered with a 4xx.
type clientBodyError struct {
	tooLarge bool
	err      error
}

func (e *clientBodyError) Error() string { return "reading client body: " + e.err.Error() }
func (e *clientBodyError) Unwrap() error { return e.err }

var errStreamTooLarge = errors.New("request body over the streaming limit")

// writeStreamed writes the head and copies s to the engine connection.
// headerWait (> 0) bounds the response head wait from the body's end.
// ctx's end stops the copy (its AfterFunc has cut the connection; the
// per-chunk deadline must not revive it).
func writeStreamed(ctx context.Context, c *upConn, addr string, in *http.Request, s *reqStream, headerWait time.Duration) error {
	w := c.bw
	writeHead(w, addr, in)
	if s.n >= 0 {
		var nb [20]byte
		w.WriteString(headerContentLength + ": ")
		w.Write(strconv.AppendInt(nb[:0], s.n, 10))
		w.WriteString("\r\n\r\n")
	} else {
		w.WriteString(headerTE + ": chunked\r\n\r\n")
	}
	var dst io.Writer = w
	var cw io.WriteCloser
	if s.n < 0 {
		cw = httputil.NewChunkedWriter(w)
		dst = cw
	}
	bp := streamBufs.Get().(*[]byte)
	defer streamBufs.Put(bp)
	buf := *bp
	var total int64
	for {
		n, rerr := s.r.Read(buf)
		if n > 0 {
			total += int64(n)
			s.sent = total
			if s.max > 0 && total > s.max {
				return &clientBodyError{tooLarge: true, err: errStreamTooLarge}
			}
			if s.progress != nil {
				s.progress()
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if s.idle > 0 {
				_ = c.nc.SetWriteDeadline(time.Now().Add(s.idle))
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return err
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return &clientBodyError{err: rerr}
		}
	}
	if s.n >= 0 && total != s.n {
		return &clientBodyError{err: fmt.Errorf("body ended after %d of %d bytes", total, s.n)}
	}
	if cw != nil {
		if err := cw.Close(); err != nil { // the 0-length last chunk
			return err
		}
		w.WriteString("\r\n") // no trailers
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var dl time.Time
	if headerWait > 0 {
		dl = time.Now().Add(headerWait)
	}
	_ = c.nc.SetDeadline(dl)
	return nil
}
