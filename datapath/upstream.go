package datapath

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"strconv"
	"strings"
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

	// writers are the request-head buffers, borrowed only while a request
	// is written: a connection holds none while it waits for a response,
	// streams one or sits idle (16 KiB less per open SSE stream).
	writers sync.Pool // *bufio.Writer

	mu     sync.Mutex
	idle   map[string][]*upConn
	closed bool
}

type upConn struct {
	nc  net.Conn
	raw syscall.RawConn // nil when nc has no file descriptor; for alive()
	br  *bufio.Reader

	// alive()'s peek: the callback is bound once per connection and writes
	// its verdict here, so the check on every reuse allocates nothing (a
	// fresh closure per call cost three allocations per request).
	peekFn   func(fd uintptr) bool
	peekLive bool
	peekBuf  [1]byte
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
	c := &upConn{nc: nc, br: bufio.NewReaderSize(nc, upstreamBufSize)}
	if sc, ok := nc.(syscall.Conn); ok {
		c.raw, _ = sc.SyscallConn() // resolved once: alive() runs on every reuse
		c.peekFn = c.peek
	}
	return c, nil
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
	if c.raw == nil {
		return true
	}
	c.peekLive = false
	err := c.raw.Read(c.peekFn)
	return err == nil && c.peekLive
}

// peek is alive()'s RawConn.Read callback.
func (c *upConn) peek(fd uintptr) bool {
	_, _, err := syscall.Recvfrom(int(fd), c.peekBuf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	c.peekLive = errors.Is(err, syscall.EAGAIN)
	return true // never wait for readiness
}

// roundTrip sends one request on a pooled connection and returns the
// response; its Body hands the connection back to the pool once read to the
// end. ctx cancellation aborts the exchange at once (the connection is then
// closed, so the engine sees the client go away).
//
// headerWait > 0 bounds writing the request and waiting for the response head
// (the error then matches os.ErrDeadlineExceeded); 0 leaves it to ctx.
//
// into, when not nil, receives the response headers and becomes
// resp.Header: the relay passes the client's header map so the engine's
// headers are parsed straight into it instead of into a map copied over
// afterwards. It must hold only X-Request-Id; on error (and for each 1xx
// response) it is put back to exactly that.
func (u *upstream) roundTrip(ctx context.Context, addr string, in *http.Request, body []byte, headerWait time.Duration, into http.Header) (*http.Response, error) {
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
	var rid []string
	if into != nil {
		rid = into[HeaderRequestID]
	}
	resetInto := func() {
		if into != nil {
			clear(into)
			into[HeaderRequestID] = rid
		}
	}
	fail := func(err error) (*http.Response, error) {
		resetInto()
		stop()
		_ = c.nc.Close()
		if cerr := context.Cause(ctx); cerr != nil {
			err = fmt.Errorf("%w (%w)", err, cerr)
		}
		return nil, err
	}
	if err := u.write(c, addr, in, body); err != nil {
		return fail(fmt.Errorf("writing request to %s: %w", addr, err))
	}
	var ur *upResponse
	for {
		ur = new(upResponse)
		rb, err := readResponseInto(ur, c.br, in, into)
		if err != nil {
			return fail(fmt.Errorf("reading response from %s: %w", addr, err))
		}
		if ur.resp.StatusCode >= 200 || ur.resp.StatusCode == http.StatusSwitchingProtocols {
			ur.body = upBody{u: u, addr: addr, c: c, r: rb, stop: stop, reuse: !ur.resp.Close}
			break // skip 1xx interim responses
		}
		resetInto()
	}
	ur.resp.Body = &ur.body
	return &ur.resp, nil
}

// upResponse is everything one engine response needs on the heap, in one
// allocation instead of five (response, body, framing, header values).
type upResponse struct {
	resp http.Response
	body upBody
	lb   lengthBody
	vals [8]string // backing array for up to 8 single-valued headers
}

// write writes the request on c through a pooled buffer.
func (u *upstream) write(c *upConn, addr string, in *http.Request, body []byte) error {
	bw, _ := u.writers.Get().(*bufio.Writer)
	if bw == nil {
		bw = bufio.NewWriterSize(c.nc, upstreamBufSize)
	} else {
		bw.Reset(c.nc)
	}
	err := writeRequest(bw, addr, in, body)
	bw.Reset(nil) // drop the connection (and any unflushed bytes after an error)
	u.writers.Put(bw)
	return err
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
		w.WriteString(headerContentLength + ": ")
		w.Write(strconv.AppendInt(w.AvailableBuffer(), int64(len(body)), 10)) // no scratch to escape
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
	r     io.Reader // the framed body (length, chunked, until close)
	stop  func() bool
	reuse bool
	done  bool
}

func (b *upBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n, err := b.r.Read(p)
	if err == io.EOF {
		b.finish(true)
	}
	return n, err
}

// buffered reports whether the rest of the body is already in the
// connection's read buffer, so reading it cannot block and needs no
// deadline (the common small JSON answer: one timer update saved).
func (b *upBody) buffered() bool {
	switch r := b.r.(type) {
	case *lengthBody:
		return r.n <= int64(b.c.br.Buffered())
	case nil:
		return true
	}
	return b.done || b.r == http.NoBody
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

// Why not http.ReadResponse: it goes through net/textproto and its transfer
// layer, which on the proxy's hot path cost about as much CPU as the rest of
// the handler (header map growth, per-line allocations, a body wrapper with
// its own mutex). Engines answer HTTP/1.1 with a handful of headers, so a
// direct parse of the head off the connection's bufio.Reader is enough; the
// chunked decoder is net/http's own (httputil.NewChunkedReader).

// errBadResponse marks an engine response head that does not parse.
var errBadResponse = errors.New("malformed HTTP response")

// commonHeaders interns the header names engines send (canonical and the
// lowercase spelling uvicorn and other ASGI servers use), so parsing them
// allocates no key strings. Read-only after package initialisation.
var commonHeaders = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{
		headerContentType, headerContentLength, headerTE, headerConnection, "Date", "Server",
		"Keep-Alive", "Cache-Control", "Content-Encoding", "Vary", "Trailer", HeaderRequestID,
		"X-Accel-Buffering",
	} {
		m[k] = k
		m[strings.ToLower(k)] = k
	}
	return m
}()

// readResponse parses one response head from br and frames its body the way
// net/http would: no body for 1xx/204/304 and HEAD, chunked, Content-Length,
// or until the engine closes (then Close is set). The returned reader yields
// the body; it ends with io.EOF only when the body is complete (a short
// Content-Length or chunked body ends with io.ErrUnexpectedEOF).
//
// Headers go into h when it is not nil (see upstream.roundTrip), else into a
// new map.
func readResponse(br *bufio.Reader, req *http.Request, h http.Header) (*http.Response, io.Reader, error) {
	ur := new(upResponse)
	body, err := readResponseInto(ur, br, req, h)
	if err != nil {
		return nil, nil, err
	}
	return &ur.resp, body, nil
}

// readResponseInto is readResponse into ur's storage: the response is
// ur.resp and a Content-Length body is framed by ur.lb.
func readResponseInto(ur *upResponse, br *bufio.Reader, req *http.Request, h http.Header) (io.Reader, error) {
	line, err := readHeadLine(br)
	if err != nil {
		return nil, err
	}
	// Every string of the head (status line, header values) is cut from one
	// allocation; line is only valid until the next read, so copy it first.
	var scratch [512]byte
	buf := append(scratch[:0], line...)
	statusEnd := len(buf)
	type field struct {
		key        string
		start, end int
	}
	var fa [16]field
	fields := fa[:0]
	for {
		l, err := readHeadLine(br)
		if err != nil {
			return nil, err
		}
		if len(l) == 0 {
			break
		}
		i := bytes.IndexByte(l, ':')
		if i <= 0 || !validHeaderKey(l[:i]) {
			return nil, fmt.Errorf("%w: header line %q", errBadResponse, l)
		}
		key, ok := commonHeaders[string(l[:i])]
		if !ok {
			key = textproto.CanonicalMIMEHeaderKey(string(l[:i]))
		}
		if h != nil && key == HeaderRequestID {
			continue // into the client's map: the client's id stays, alone
		}
		v := trimOWS(l[i+1:])
		fields = append(fields, field{key, len(buf), len(buf) + len(v)})
		buf = append(buf, v...)
	}
	head := string(buf)

	proto, status, ok := strings.Cut(head[:statusEnd], " ")
	major, minor, vok := http.ParseHTTPVersion(proto)
	if !ok || !vok || len(status) < 3 || (len(status) > 3 && status[3] != ' ') {
		return nil, fmt.Errorf("%w: status line %q", errBadResponse, head[:statusEnd])
	}
	code, err := strconv.Atoi(status[:3])
	if err != nil || code < 100 {
		return nil, fmt.Errorf("%w: status line %q", errBadResponse, head[:statusEnd])
	}
	resp := &ur.resp
	*resp = http.Response{
		Status: status, StatusCode: code, Proto: proto, ProtoMajor: major, ProtoMinor: minor,
		Header: h, Request: req,
	}
	if h == nil {
		resp.Header = make(http.Header, len(fields))
	}
	vals := ur.vals[:] // one backing array for the usual single values
	if len(fields) > len(vals) {
		vals = make([]string, len(fields))
	}
	for k, f := range fields {
		v := head[f.start:f.end]
		if prior, ok := resp.Header[f.key]; ok {
			resp.Header[f.key] = append(prior, v)
			continue
		}
		vals[k] = v
		resp.Header[f.key] = vals[k : k+1 : k+1]
	}
	return frameBody(br, req, resp, &ur.lb)
}

// frameBody sets ContentLength and Close and returns the body reader; a
// Content-Length body is framed by lb (the caller's storage).
func frameBody(br *bufio.Reader, req *http.Request, resp *http.Response, lb *lengthBody) (io.Reader, error) {
	h := resp.Header
	resp.Close = headerHasToken(h[headerConnection], "close") ||
		(resp.ProtoMajor == 1 && resp.ProtoMinor == 0 && !headerHasToken(h[headerConnection], "keep-alive"))
	code := resp.StatusCode
	if code/100 == 1 || code == http.StatusNoContent || code == http.StatusNotModified ||
		(req != nil && req.Method == http.MethodHead) {
		return http.NoBody, nil
	}
	if te := h[headerTE]; len(te) > 0 {
		if len(te) != 1 || !strings.EqualFold(te[0], "chunked") {
			return nil, fmt.Errorf("%w: unsupported transfer encoding %q", errBadResponse, te)
		}
		delete(h, headerTE) // as net/http: the framing is ours, not the header's
		delete(h, headerContentLength)
		resp.TransferEncoding = []string{"chunked"}
		resp.ContentLength = -1
		return &chunkedBody{cr: httputil.NewChunkedReader(br), br: br}, nil
	}
	if cl := h[headerContentLength]; len(cl) > 0 {
		n, err := strconv.ParseInt(cl[0], 10, 64)
		for _, v := range cl[1:] {
			if v != cl[0] {
				err = errors.New("conflicting values")
			}
		}
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%w: Content-Length %q", errBadResponse, cl)
		}
		resp.ContentLength = n
		if n == 0 {
			return http.NoBody, nil
		}
		*lb = lengthBody{r: br, n: n}
		return lb, nil
	}
	resp.ContentLength = -1
	resp.Close = true // the end of the body is the end of the connection
	return br, nil
}

// readHeadLine returns one head line without its CRLF (valid until the next
// read); a line longer than the buffer is an error.
func readHeadLine(br *bufio.Reader) ([]byte, error) {
	l, err := br.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("%w: header line too long", errBadResponse)
		}
		if errors.Is(err, io.EOF) && len(l) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	l = l[:len(l)-1]
	if n := len(l); n > 0 && l[n-1] == '\r' {
		l = l[:n-1]
	}
	return l, nil
}

// trimOWS strips the optional whitespace around a header value (bytes.Trim
// builds its cutset on every call).
func trimOWS(v []byte) []byte {
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	return v
}

// tokenChars marks the bytes allowed in an RFC 9110 token (header names).
// Read-only after package initialisation.
var tokenChars = func() (t [256]bool) {
	for b := 0x21; b < 0x7f; b++ {
		t[b] = strings.IndexByte("\"(),/:;<=>?@[\\]{}", byte(b)) < 0
	}
	return t
}()

// validHeaderKey reports whether k is a non-empty RFC 9110 token.
func validHeaderKey(k []byte) bool {
	for _, b := range k {
		if !tokenChars[b] {
			return false
		}
	}
	return len(k) > 0
}

// headerHasToken reports whether a comma-separated header holds tok.
func headerHasToken(vv []string, tok string) bool {
	for _, v := range vv {
		for f := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(f), tok) {
				return true
			}
		}
	}
	return false
}

// lengthBody reads exactly n bytes; an earlier EOF is io.ErrUnexpectedEOF
// so a truncated body never looks complete.
type lengthBody struct {
	r io.Reader
	n int64
}

func (b *lengthBody) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	n, err := b.r.Read(p)
	b.n -= int64(n)
	if b.n <= 0 {
		return n, io.EOF
	}
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// chunkedBody decodes a chunked body and consumes the trailer section after
// the last chunk, leaving the connection at the next response.
type chunkedBody struct {
	cr   io.Reader
	br   *bufio.Reader
	done bool
}

func (b *chunkedBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n, err := b.cr.Read(p)
	if errors.Is(err, io.EOF) {
		for { // trailers (dropped) up to the empty line
			l, terr := readHeadLine(b.br)
			if terr != nil {
				if errors.Is(terr, io.EOF) {
					terr = io.ErrUnexpectedEOF
				}
				return n, terr
			}
			if len(l) == 0 {
				break
			}
		}
		b.done = true
	}
	return n, err
}
