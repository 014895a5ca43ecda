package datapath

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// upstream is the datapath's HTTP/1.1 client to engines: a keep-alive pool
// per endpoint and a request/response exchange run on the caller's goroutine.
//
// Why not http.Transport: it runs a reader and a writer goroutine per
// connection and hands every request to them over channels, which on a small
// box costs more than the proxying itself. Here the handler goroutine writes
// the request and reads the response directly. A pooled connection is
// checked with a non-blocking peek before reuse, so a connection the engine
// closed while idle (uvicorn drops them after 5 s) is discarded instead of
// failing a request that cannot be replayed.
type upstream struct {
	dialer  net.Dialer
	maxIdle int // per endpoint

	mu     sync.Mutex
	idle   map[string][]*upConn
	closed bool
}

type upConn struct {
	nc net.Conn
	br *bufio.Reader
	bw *bufio.Writer
}

const upstreamBufSize = 16 << 10

// aLongTimeAgo is a deadline in the past: it unblocks pending I/O at once.
var aLongTimeAgo = time.Unix(1, 0)

func newUpstream(dialTimeout time.Duration, maxIdle int) *upstream {
	return &upstream{
		dialer:  net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second},
		maxIdle: maxIdle,
		idle:    make(map[string][]*upConn),
	}
}

// get returns a live pooled connection to addr or dials a new one. A dial
// failure is a *DialError: nothing was sent.
func (u *upstream) get(ctx context.Context, addr string) (*upConn, error) {
	for {
		u.mu.Lock()
		list := u.idle[addr]
		n := len(list)
		if n == 0 {
			u.mu.Unlock()
			break
		}
		c := list[n-1]
		list[n-1] = nil
		u.idle[addr] = list[:n-1]
		u.mu.Unlock()
		if c.alive() {
			return c, nil
		}
		_ = c.nc.Close()
	}
	nc, err := u.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, &DialError{Endpoint: addr, Err: err}
	}
	return &upConn{nc: nc, br: bufio.NewReaderSize(nc, upstreamBufSize), bw: bufio.NewWriterSize(nc, upstreamBufSize)}, nil
}

// put returns a connection whose last response was read completely.
func (u *upstream) put(addr string, c *upConn) {
	u.mu.Lock()
	if !u.closed && len(u.idle[addr]) < u.maxIdle {
		u.idle[addr] = append(u.idle[addr], c)
		u.mu.Unlock()
		return
	}
	u.mu.Unlock()
	_ = c.nc.Close()
}

// closeIdle closes every pooled connection and stops pooling.
func (u *upstream) closeIdle() {
	u.mu.Lock()
	idle := u.idle
	u.idle = make(map[string][]*upConn)
	u.closed = true
	u.mu.Unlock()
	for _, list := range idle {
		for _, c := range list {
			_ = c.nc.Close()
		}
	}
}

// alive peeks at an idle connection without blocking: no bytes and no EOF
// means the engine still holds it open.
func (c *upConn) alive() bool {
	if c.br.Buffered() > 0 {
		return false // unsolicited bytes: the stream is out of sync
	}
	sc, ok := c.nc.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := false
	err = raw.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		alive = errors.Is(rerr, syscall.EAGAIN)
		return true // never wait for readiness
	})
	return err == nil && alive
}

// roundTrip sends one request on a pooled connection and returns the
// response; its Body hands the connection back to the pool once read to the
// end. ctx cancellation aborts the exchange at once (the connection is then
// closed, so the engine sees the client go away).
//
// headerWait > 0 bounds writing the request and waiting for the response head
// (the error then matches os.ErrDeadlineExceeded); 0 leaves it to ctx.
func (u *upstream) roundTrip(ctx context.Context, addr string, in *http.Request, body []byte, headerWait time.Duration) (*http.Response, error) {
	c, err := u.get(ctx, addr)
	if err != nil {
		return nil, err
	}
	var dl time.Time // zero clears a deadline left by the connection's previous use
	if headerWait > 0 {
		dl = time.Now().Add(headerWait)
	}
	_ = c.nc.SetDeadline(dl) // also bounds writing the request to a stuck engine
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(aLongTimeAgo) })
	fail := func(err error) (*http.Response, error) {
		stop()
		_ = c.nc.Close()
		if cerr := context.Cause(ctx); cerr != nil {
			err = fmt.Errorf("%w (%w)", err, cerr)
		}
		return nil, err
	}
	if err := writeRequest(c.bw, addr, in, body); err != nil {
		return fail(fmt.Errorf("writing request to %s: %w", addr, err))
	}
	var resp *http.Response
	for {
		resp, err = http.ReadResponse(c.br, in)
		if err != nil {
			return fail(fmt.Errorf("reading response from %s: %w", addr, err))
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break // skip 1xx interim responses
		}
	}
	resp.Body = &upBody{u: u, addr: addr, c: c, rc: resp.Body, stop: stop, reuse: !resp.Close}
	return resp, nil
}

// writeRequest writes an HTTP/1.1 request head and body. Header values come
// from net/http's parser (or our own code), so they carry no CR/LF.
func writeRequest(w *bufio.Writer, addr string, in *http.Request, body []byte) error {
	uri := in.RequestURI
	if uri == "" || uri[0] != '/' {
		uri = in.URL.RequestURI()
	}
	w.WriteString(in.Method)
	w.WriteByte(' ')
	w.WriteString(uri)
	w.WriteString(" HTTP/1.1\r\n" + headerHost + ": ")
	w.WriteString(addr)
	w.WriteString("\r\n")
	for k, vv := range in.Header {
		if k == headerHost || k == headerContentLength || k == headerTE {
			continue
		}
		for _, v := range vv {
			w.WriteString(k)
			w.WriteString(": ")
			w.WriteString(v)
			w.WriteString("\r\n")
		}
	}
	if body != nil || in.Method == http.MethodPost || in.Method == http.MethodPut || in.Method == http.MethodPatch {
		var nb [20]byte
		w.WriteString(headerContentLength + ": ")
		w.Write(strconv.AppendInt(nb[:0], int64(len(body)), 10))
		w.WriteString("\r\n")
	}
	w.WriteString("\r\n")
	w.Write(body)
	return w.Flush()
}

// upBody returns the connection to the pool when the response was read to
// its end, and closes it otherwise (a half-read body cannot be reused).
type upBody struct {
	u     *upstream
	addr  string
	c     *upConn
	rc    io.ReadCloser
	stop  func() bool
	reuse bool
	done  bool
}

func (b *upBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.finish(true)
	}
	return n, err
}

// setReadDeadline bounds the next reads of the body (idle timeouts).
func (b *upBody) setReadDeadline(t time.Time) { _ = b.c.nc.SetReadDeadline(t) }

func (b *upBody) Close() error {
	if !b.done {
		b.finish(false)
	}
	return nil
}

func (b *upBody) finish(complete bool) {
	b.done = true
	notCanceled := b.stop()
	if complete && b.reuse && notCanceled {
		b.u.put(b.addr, b.c)
		return
	}
	_ = b.c.nc.Close()
}
