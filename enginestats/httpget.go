package enginestats

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// getter is one worker's keep-alive HTTP/1.1 connection to a plaintext
// target. A scrape is one GET on a connection only its worker uses, so
// it needs none of net/http's per-connection goroutines and channel
// hand-offs — on a busy host those wake-ups cost more than the scrape
// itself (TestScrapeCost). TLS targets use net/http.
type getter struct {
	addr string // host:port to dial
	req  []byte // the whole request, built once

	mu      sync.Mutex       // guards so, br and stopped against close from Scraper.Drop
	so      *socket          // the connection; nil: none open
	br      *bufio.Reader    // reads so
	stopped bool             // stop was called: never dial again
	lr      io.LimitedReader // a Content-Length body; reused
}

// newGetter prepares GETs of rawURL+query; nil when rawURL is not plain
// http (the caller then uses net/http).
func newGetter(rawURL, query string) *getter {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "http" || u.Host == "" || u.User != nil {
		return nil
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "80")
	}
	path := u.EscapedPath()
	if path == "" {
		path = "/"
	}
	if query != "" && u.RawQuery == "" {
		path += query
	} else if u.RawQuery != "" {
		path += "?" + u.RawQuery
	}
	req := "GET " + path + " HTTP/1.1\r\nHost: " + u.Host + "\r\nUser-Agent: infergate-enginestats\r\nAccept: " + acceptHeader + "\r\n\r\n"
	return &getter{addr: host, req: []byte(req)}
}

// errTooLarge and errStatus carry a scrape's reason out of get.
var (
	errTooLarge = errors.New("body over the size cap")
	errStatus   = errors.New("status other than 200")
	errFraming  = errors.New("malformed HTTP response")
)

// send writes the request, dialing first when there is no connection.
// reused says the request went on a connection an earlier scrape left
// open (the engine may have closed it meanwhile: the answer then fails
// and get retries once on a fresh one).
func (g *getter) send(deadline time.Time) (reused bool, err error) {
	g.mu.Lock()
	so, stopped := g.so, g.stopped
	g.mu.Unlock()
	if stopped {
		return false, net.ErrClosed
	}
	if so == nil {
		c, err := (&net.Dialer{Deadline: deadline}).Dial("tcp", g.addr)
		if err != nil {
			return false, err
		}
		so = newSocket(c)
		g.mu.Lock()
		if g.stopped { // stopped while dialing
			g.mu.Unlock()
			so.close()
			return false, net.ErrClosed
		}
		g.so, g.br = so, bufio.NewReaderSize(so, 16<<10)
		g.mu.Unlock()
	} else {
		reused = true
	}
	return reused, g.write(so, deadline)
}

// presend writes the request on the open connection, if there is one, so
// the answer is on its way before the worker runs (the scheduler sends a
// whole burst this way). It never waits and never dials, and it sets no
// deadline: nothing waits until get, which sets it. false: nothing was
// sent (a request cut short closes the connection); the worker's get does
// it all, dial included.
func (g *getter) presend() bool {
	g.mu.Lock()
	so := g.so
	g.mu.Unlock()
	if so == nil || !so.raw {
		return false // net.Conn has no write that never waits
	}
	if err := so.write(g.req, false); err != nil {
		g.close()
		return false
	}
	return true
}

// write sets the scrape's deadline on so and writes the request; a failure
// closes the connection.
func (g *getter) write(so *socket, deadline time.Time) error {
	err := so.setDeadline(deadline)
	if err == nil {
		err = so.write(g.req, true)
	}
	if err != nil {
		g.close()
	}
	return err
}

// get fetches the body into buf (grown up to limit); sent says presend
// already wrote the request. Any failure closes the connection; the next
// scrape dials again.
func (g *getter) get(deadline time.Time, limit int64, buf []byte, sent bool) ([]byte, error) {
	reused := sent
	if !sent {
		var err error
		if reused, err = g.send(deadline); err != nil {
			if reused && time.Now().Before(deadline) {
				return g.get(deadline, limit, buf, false) // a fresh connection, once
			}
			return buf, err
		}
	}
	g.mu.Lock()
	so, br := g.so, g.br
	g.mu.Unlock()
	if so == nil {
		if sent && time.Now().Before(deadline) {
			// tryReceive dropped a connection the engine had closed, and
			// presend's request with it: ask again on a fresh one.
			return g.get(deadline, limit, buf, false)
		}
		return buf, net.ErrClosed // stopped meanwhile
	}
	if sent {
		if err := so.setDeadline(deadline); err != nil {
			g.close()
			return buf, err
		}
	}
	body, keep, err := g.receive(br, limit, buf)
	if err != nil && reused && !errors.Is(err, errTooLarge) && !errors.Is(err, errStatus) && time.Now().Before(deadline) {
		// The engine closed the idle connection: one fresh try.
		g.close()
		return g.get(deadline, limit, body[:0], false)
	}
	if err != nil || !keep {
		g.close()
		return body, err
	}
	// Clear the deadline: on a connection the runtime polls, its timer
	// would otherwise stay in the runtime's heap at the time it was first
	// set and wake the process there for nothing, every scrape. A cleared
	// one is dropped at the next check.
	_ = so.setDeadline(time.Time{})
	return body, nil
}

// receive reads one response from br (the connection's deadline is set).
func (g *getter) receive(br *bufio.Reader, limit int64, buf []byte) (body []byte, keep bool, err error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return buf, false, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return buf, false, errFraming
	}
	status := line[9:12]
	length, chunked, keep := int64(-1), false, line[7] == '1'
	for {
		h, err := br.ReadSlice('\n')
		if err != nil {
			return buf, false, err
		}
		h = bytes.TrimRight(h, "\r\n")
		if len(h) == 0 {
			break
		}
		k, v, ok := bytes.Cut(h, []byte(":"))
		if !ok {
			return buf, false, errFraming
		}
		v = bytes.TrimSpace(v)
		switch {
		case bytes.EqualFold(k, []byte("Content-Length")):
			n, perr := strconv.ParseInt(string(v), 10, 64)
			if perr != nil || n < 0 {
				return buf, false, errFraming
			}
			length = n
		case bytes.EqualFold(k, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(v, []byte("chunked"))
			if !chunked {
				return buf, false, errFraming
			}
		case bytes.EqualFold(k, []byte("Connection")):
			if bytes.EqualFold(v, []byte("close")) {
				keep = false
			}
		}
	}
	if string(status) != "200" {
		return buf, false, errStatus
	}
	var r io.Reader
	switch {
	case chunked:
		r = httputil.NewChunkedReader(br)
	case length >= 0:
		if length > limit {
			return buf, false, errTooLarge
		}
		g.lr = io.LimitedReader{R: br, N: length}
		r = &g.lr
	default:
		r, keep = br, false // read to close
	}
	body, reason := readCapped(r, buf[:0], limit)
	switch reason {
	case ReasonTooLarge:
		return body, false, errTooLarge
	case ReasonConnect:
		return body, false, io.ErrUnexpectedEOF
	}
	if length >= 0 && int64(len(body)) != length {
		return body, false, io.ErrUnexpectedEOF
	}
	if chunked { // the trailer section ends the message
		for {
			t, err := br.ReadSlice('\n')
			if err != nil {
				return body, false, err
			}
			if len(bytes.TrimRight(t, "\r\n")) == 0 {
				break
			}
		}
	}
	return body, keep, nil
}

// stop closes the connection for good: a scrape waiting on it returns,
// and no retry dials again (the target is gone; a request after that
// would reach an engine nobody scrapes any more).
func (g *getter) stop() {
	g.mu.Lock()
	g.stopped = true
	g.mu.Unlock()
	g.close()
}

// close drops the connection (a scrape waiting on it returns).
func (g *getter) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.so != nil {
		g.so.close()
		g.so, g.br = nil, nil
	}
}
