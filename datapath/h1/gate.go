package h1

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// GateListener wraps l so that every connection it accepts shows its
// reader (net/http's server) only requests whose framing this package's
// parser accepts: each request head is read and checked whole before any
// of it is passed on, bodies pass by their Content-Length or as chunked
// coding re-framed in canonical form (extensions and trailers dropped),
// and a refused head is replaced by a request line net/http itself
// answers 400 and closes on, so nothing after it is ever read as a
// request. net/http on its own lets Transfer-Encoding win over
// Content-Length, unfolds obs-fold and takes a lone LF as a line end;
// behind a proxy that reads the same bytes differently that is a desync
// (test/framingdiff shows the shapes).
//
// headerTimeout (the server's ReadHeaderTimeout; 0: none) bounds each
// head from its first byte, as net/http bounds it from readRequest: net/http
// waits for a keep-alive request by a Peek that, through the gate, returns
// only once the whole head is in, so without the gate's own clock a head
// after the first would be bounded by the idle timeout alone (or nothing).
//
// The gate is for plaintext HTTP/1.1 only: it does not know TLS or HTTP/2.
func GateListener(l net.Listener, headerTimeout time.Duration) net.Listener {
	return gateListener{l, headerTimeout}
}

type gateListener struct {
	net.Listener
	headerTimeout time.Duration
}

func (l gateListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &gateConn{Conn: c, br: bufio.NewReaderSize(c, readBufSize), hdrTimeout: l.headerTimeout}, nil
}

// What a gate reads next.
const (
	gateHead      = iota // a request head
	gateLength           // n bytes of a Content-Length body
	gateChunkSize        // a chunk-size line (or the last chunk and trailers)
	gateChunkData        // n bytes of chunk data
	gateChunkEnd         // the CRLF after chunk data
)

// gateRefused is what the reader is given instead of a refused head: a
// method that is no token, which net/http answers 400 and closes on.
const gateRefused = "\x00 / HTTP/1.1\r\n\r\n"

// gateConn is one gated connection. Read is called by one goroutine at a
// time (net/http's connection reader), as on any net.Conn.
type gateConn struct {
	net.Conn
	br    *bufio.Reader
	state int
	n     int64 // bytes left in a Content-Length body or a chunk

	hs   headScan   // the head read so far (kept across a read deadline)
	vals [16]string // backs the checked head's values (a local escapes: one allocation per head)

	out    []byte // checked bytes the reader has yet to take
	outOff int
	err    error // sticky: returned once out is drained

	hdrTimeout time.Duration
	// mu guards rd and headEnd: net/http sets read deadlines from another
	// goroutine while its background read is in Read.
	mu      sync.Mutex
	rd      time.Time // the read deadline the reader set
	headEnd time.Time // the head clock's end (zero: not running)
}

// SetReadDeadline records the reader's deadline; the connection's is the
// sooner of it and the head clock's.
func (g *gateConn) SetReadDeadline(t time.Time) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.rd = t
	return g.Conn.SetReadDeadline(g.readDeadline())
}

// SetDeadline is SetReadDeadline and the write deadline.
func (g *gateConn) SetDeadline(t time.Time) error {
	if err := g.Conn.SetWriteDeadline(t); err != nil {
		return err
	}
	return g.SetReadDeadline(t)
}

// readDeadline is the sooner of rd and headEnd (g.mu held).
func (g *gateConn) readDeadline() time.Time {
	if g.headEnd.IsZero() || (!g.rd.IsZero() && g.rd.Before(g.headEnd)) {
		return g.rd
	}
	return g.headEnd
}

// setHeadEnd starts (t non-zero) or stops the head clock.
func (g *gateConn) setHeadEnd(t time.Time) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.headEnd = t
	return g.Conn.SetReadDeadline(g.readDeadline())
}

// NetConn is the connection under the gate (the admission layer finds its
// own connection through it).
func (g *gateConn) NetConn() net.Conn { return g.Conn }

func (g *gateConn) Read(p []byte) (int, error) {
	for {
		if g.outOff < len(g.out) {
			n := copy(p, g.out[g.outOff:])
			g.outOff += n
			return n, nil
		}
		if g.err != nil {
			return 0, g.err
		}
		if len(p) == 0 {
			return 0, nil
		}
		g.out, g.outOff = g.out[:0], 0
		switch g.state {
		case gateHead:
			// A one-byte read is net/http's background read while a
			// handler runs: net/http would time the head it starts from
			// its next readRequest, so the clock waits for that read.
			if err := g.readHead(len(p) > 1); err != nil {
				return 0, err
			}
		case gateLength, gateChunkData:
			q := p
			if int64(len(q)) > g.n {
				q = q[:g.n]
			}
			n, err := g.br.Read(q)
			g.n -= int64(n)
			if g.n == 0 && g.state == gateLength {
				g.state = gateHead
			} else if g.n == 0 {
				g.state = gateChunkEnd
			}
			if n > 0 {
				return n, nil
			}
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			g.err = err
		case gateChunkSize:
			size, err := readChunkSize(g.br)
			switch {
			case err != nil:
				g.err = err
			case size == 0:
				if err := skipTrailers(g.br); err != nil {
					g.err = err
					continue
				}
				g.out = append(g.out, "0\r\n\r\n"...)
				g.state = gateHead
			default:
				g.out = strconv.AppendInt(g.out, size, 16)
				g.out = append(g.out, "\r\n"...)
				g.n, g.state = size, gateChunkData
			}
		case gateChunkEnd:
			if err := expectCRLF(g.br); err != nil {
				g.err = err
				continue
			}
			g.out = append(g.out, "\r\n"...)
			g.state = gateChunkSize
		}
	}
}

// readHead reads one request head with the lean server's headScan and
// queues it for the reader once parseRequest accepts it. A read
// deadline (net/http aborts its background read with one) leaves the
// partial head for the next call. timed starts the head clock, at the
// head's first byte, if it is not running.
func (g *gateConn) readHead(timed bool) error {
	if timed && g.hdrTimeout > 0 && g.headEnd.IsZero() {
		if len(g.hs.head) == 0 && g.hs.leading == 0 {
			if _, err := g.br.Peek(1); err != nil {
				return g.headErr(err)
			}
		}
		if err := g.setHeadEnd(time.Now().Add(g.hdrTimeout)); err != nil {
			return fmt.Errorf("h1: gate: head deadline: %w", err)
		}
	}
	err := g.hs.scan(g.br, DefaultMaxHeaderByte)
	if isRefusal(err) {
		return g.refuse()
	}
	if err != nil {
		return g.headErr(err)
	}
	r := http.Request{URL: &url.URL{}}
	p, err := parseRequest(string(g.hs.head), nil, &r, g.vals[:], nil)
	if err != nil {
		return g.refuse()
	}
	g.out = append(g.out, g.hs.head...)
	g.hs.reset()
	if err := g.stopHeadClock(); err != nil {
		return err
	}
	switch {
	case p.chunked:
		g.state = gateChunkSize
	case r.ContentLength > 0:
		g.state, g.n = gateLength, r.ContentLength
		g.takeBuffered()
	}
	return nil
}

// headErr handles a read error inside a head. The reader's own deadline
// (an aborted background read) leaves the partial head for the next call;
// the head clock's end, or any other error, ends the connection with
// nothing of the head passed on.
func (g *gateConn) headErr(err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		if end := g.headEnd; !end.IsZero() && !time.Now().Before(end) {
			g.err = err
		}
		return err
	}
	g.err = err // the head was cut short: nothing of it is passed
	return nil
}

// stopHeadClock puts the reader's own read deadline back.
func (g *gateConn) stopHeadClock() error {
	if g.headEnd.IsZero() {
		return nil
	}
	if err := g.setHeadEnd(time.Time{}); err != nil {
		return fmt.Errorf("h1: gate: head deadline: %w", err)
	}
	return nil
}

// refuse hands the reader a request it refuses, then the end of input.
func (g *gateConn) refuse() error {
	g.out = append(g.out[:0], gateRefused...)
	g.hs.reset()
	g.err = io.EOF
	return g.stopHeadClock()
}

// takeBuffered queues the part of a Content-Length body already read in
// behind its head, so the reader gets them in one read as it would from
// the socket (handed over in a second read, requests through net/http
// took 1.5–3× longer in BenchmarkFrontEnd, waiting rather than working).
func (g *gateConn) takeBuffered() {
	k := min(g.n, int64(g.br.Buffered()))
	if k == 0 {
		return
	}
	b, _ := g.br.Peek(int(k))
	g.out = append(g.out, b...)
	_, _ = g.br.Discard(int(k))
	if g.n -= k; g.n == 0 {
		g.state = gateHead
	}
}
