package datapath

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/infergate/infergate/datapath/spec"
	"github.com/sirupsen/logrus"
)

// Wire names the proxy reads or rewrites.
const (
	fieldModel          = "model" // body field used for model routing
	headerForwardedFor  = "X-Forwarded-For"
	headerConnection    = "Connection"
	headerContentType   = "Content-Type"
	headerContentLength = "Content-Length"
	headerHost          = "Host"
	headerTE            = "Transfer-Encoding"
	contentTypeJSON     = "application/json"
	contentTypeSSE      = "text/event-stream"
	maxClientRequestID  = 128 // longer client ids are replaced
	statusClientClosed  = 499 // metrics only: the client went away
	codeClientClosed    = "client_closed"
	sseStreamCappedLine = "data: {\"error\":\"max_stream_duration_exceeded\"}\n\n"
)

// hopHeaders are connection-scoped and never forwarded (RFC 9110 §7.6.1).
var hopHeaders = [...]string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Expect",
	"Proxy-Authorization", "Te", "Trailer", headerTE, "Upgrade",
}

// exchange is one client request in flight.
type exchange struct {
	w           http.ResponseWriter
	r           *http.Request
	start       time.Time
	requestID   string
	wroteHeader bool
}

// ServeHTTP is the entry of every data request on the listener: request id,
// API check, body, rule match, then the rule's handler.
func (ln *listener) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt := ln.rt
	x := &exchange{w: w, r: r, start: time.Now()}
	defer rt.recoverPanic(x)
	if rt.hookServe != nil {
		rt.hookServe(r)
	}

	rid := r.Header.Get(HeaderRequestID)
	if rid == "" || len(rid) > maxClientRequestID {
		rid = newRequestID()
		r.Header.Set(HeaderRequestID, rid)
	}
	w.Header()[HeaderRequestID] = []string{rid}
	x.requestID = rid
	ln.setHSTS(w, r) // TLS listeners only

	if status, code, msg, allow := checkAPI(r.Method, r.URL.Path); status != 0 {
		if allow != "" {
			w.Header().Set(HeaderAllow, allow)
		}
		rt.fail(x, nil, -1, status, code, msg)
		return
	}
	body, status, code, msg := rt.readBody(w, r)
	if status != 0 {
		rt.fail(x, nil, -1, status, code, msg)
		return
	}
	t := ln.table.Load()
	model := r.Header.Get(HeaderModel)
	if model == "" && t.needsModel && len(body) > 0 {
		m, err := bodyModel(body)
		if err != nil {
			rt.fail(x, nil, -1, http.StatusBadRequest, CodeInvalidJSON, "request body is not valid JSON: "+err.Error())
			return
		}
		model = m
	}
	rs := t.match(hostOnly(r.Host), r.URL.Path, model)
	if rs == nil {
		msg := "no rule on this address matches host " + strconvQuote(hostOnly(r.Host)) + ", path " + strconvQuote(r.URL.Path)
		if model != "" {
			msg += ", model " + strconvQuote(model)
		}
		rt.fail(x, nil, -1, http.StatusNotFound, CodeNoMatchingRule, msg)
		return
	}
	c := rs.cur.Load()
	if c.rule.PD != nil {
		rt.servePD(x, c, body)
		return
	}
	rt.serveSingle(x, c, body)
}

// fail answers a gateway error and counts it (c nil: no rule matched).
func (rt *Runtime) fail(x *exchange, c *compiled, ep, status int, code, msg string) {
	if !x.wroteHeader {
		x.wroteHeader = true
		writeError(x.w, status, code, msg)
	}
	if c == nil {
		rt.m.Requests.WithLabelValues("", "", strconv.Itoa(status), code).Inc()
		return
	}
	c.countRequest(ep, status, code)
	c.latency.Observe(time.Since(x.start).Seconds())
}

// recoverPanic turns a handler panic into a counted 500 (or a cut
// connection when the response had already started).
func (rt *Runtime) recoverPanic(x *exchange) {
	v := recover()
	if v == nil {
		return
	}
	if v == http.ErrAbortHandler { //nolint:errorlint // sentinel identity is the contract
		panic(v)
	}
	rt.m.Panics.Inc()
	rt.log.WithFields(logrus.Fields{"panic": fmt.Sprint(v), "path": x.r.URL.Path}).Error("datapath handler panic recovered")
	rt.log.Debug(string(debug.Stack()))
	if x.wroteHeader {
		panic(http.ErrAbortHandler)
	}
	rt.fail(x, nil, -1, http.StatusInternalServerError, CodeInternal, "internal gateway error")
}

// readBody reads the whole request body (needed for model routing and for
// dial-failure retries) bounded by MaxBodyBytes.
func (rt *Runtime) readBody(w http.ResponseWriter, r *http.Request) ([]byte, int, string, string) {
	max := rt.opts.MaxBodyBytes
	// A failed read leaves the connection unusable; "Connection: close" also
	// stops net/http from draining the rest of the body before answering.
	failed := func(status int, code, msg string) ([]byte, int, string, string) {
		w.Header().Set(headerConnection, "close")
		return nil, status, code, msg
	}
	tooLarge := func() ([]byte, int, string, string) {
		return failed(http.StatusRequestEntityTooLarge, CodeBodyTooLarge,
			"request body exceeds the limit of "+strconv.FormatInt(max, 10)+" bytes")
	}
	switch {
	case r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody:
		rt.liftReadDeadline(w)
		return nil, 0, "", ""
	case r.ContentLength > max:
		return tooLarge()
	}
	// A client that stops sending mid-body must not pin the handler: the
	// listener's ReadTimeout (BodyReadTimeout) is the read deadline here.
	// It is lifted after a good read (long SSE responses follow) and kept
	// after a failed one.
	var b []byte
	var err error
	if r.ContentLength > 0 {
		b = make([]byte, r.ContentLength)
		_, err = io.ReadFull(r.Body, b)
	} else {
		b, err = io.ReadAll(io.LimitReader(r.Body, max+1))
	}
	if err != nil {
		return failed(http.StatusBadRequest, CodeBadRequestBody, "reading request body: "+err.Error())
	}
	if int64(len(b)) > max {
		return tooLarge()
	}
	rt.liftReadDeadline(w)
	return b, 0, "", ""
}

// liftReadDeadline clears the listener's request read deadline once the
// body is in: net/http's background read, which notices a client leaving,
// would otherwise cancel a long response when it fires.
func (rt *Runtime) liftReadDeadline(w http.ResponseWriter) {
	if rt.opts.BodyReadTimeout > 0 {
		_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	}
}

// bodyModel reads the top-level "model" string of a JSON body without
// decoding anything else.
func bodyModel(body []byte) (string, error) {
	var v struct {
		Model json.RawMessage `json:"model"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return "", err
	}
	var s string
	if len(v.Model) > 0 && v.Model[0] == '"' {
		if err := json.Unmarshal(v.Model, &s); err != nil {
			return "", err
		}
	}
	return s, nil
}

// serveSingle proxies a single-pool request: pick, send, retry on dial
// failure (bounded by the pool size), relay.
func (rt *Runtime) serveSingle(x *exchange, c *compiled, body []byte) {
	rt.serveSingleExcl(x, c, body, 0)
}

// serveSingleExcl is serveSingle over the endpoints outside excl (a P/D
// rule's body-less relay and role-0 fallback restrict it to one role).
func (rt *Runtime) serveSingleExcl(x *exchange, c *compiled, body []byte, excl uint64) {
	r := x.r
	f := pickFacts{clientIP: clientIP(r.RemoteAddr)}
	switch c.rule.Selector {
	case spec.SelPersist:
		f.session = c.sessionKey(r, f.clientIP)
	case spec.SelCHWBL, spec.SelWeightedCHWBL:
		c.chwblKey(&f, r, body)
	}
	prepareOutboundHeader(r.Header, f.clientIP)

	// Timeouts are read deadlines on the engine connection (no per-request
	// timer or derived context); the client's context still aborts the
	// exchange at once when the client goes away.
	ctx := r.Context()
	idle := c.rule.IdleTimeout
	if idle <= 0 {
		idle = rt.opts.DefaultIdle
	}
	headerWait := max(idle, rt.opts.FirstByteTimeout)

	// The engine's headers are parsed straight into the client's header map
	// when it holds nothing but the request id (the usual case).
	var into http.Header
	if h := x.w.Header(); len(h) == 1 && len(h[HeaderRequestID]) == 1 {
		into = h
	}

	attempts := 0
	for attempts < len(c.eps) {
		i := -1
		if attempts == 0 && c.kv != nil && c.kv.Mode() == 3 && c.rule.PD == nil {
			i = rt.pickKV(c, r, body, excl)
		}
		if i < 0 {
			i, excl = c.pickAdmitted(&f, excl)
		}
		if i < 0 {
			break
		}
		attempts++
		ep := c.eps[i]
		ep.active.Add(1)
		c.epm[i].active.Inc()
		resp, err := rt.up.roundTrip(ctx, ep.id, c.up, r, body, headerWait, into)
		if err != nil {
			ep.active.Add(-1)
			c.epm[i].active.Dec()
			var de *DialError
			if errors.As(err, &de) && de.NotSent() && ctx.Err() == nil {
				if c.cb.enabled {
					c.recordBreaker(i, ep.br.onDialFailure(&c.cb))
				}
				excl |= bit(i)
				rt.m.Retries.WithLabelValues(c.label).Inc()
				rt.log.WithFields(logrus.Fields{"rule": c.label, "endpoint": ep.id, "error": err.Error()}).Debug("dial failed; trying another endpoint")
				continue
			}
			rt.sendFailed(x, c, i, err)
			return
		}
		if attempts > 1 {
			rt.m.Failover.WithLabelValues(c.label).Inc()
		}
		rt.relay(x, c, i, idle, resp, into != nil)
		return
	}
	if attempts == 0 {
		rt.fail(x, c, -1, http.StatusServiceUnavailable, CodeNoHealthyBackend,
			"all backend endpoints are down, draining or circuit-broken")
		return
	}
	rt.fail(x, c, -1, http.StatusBadGateway, CodeBackendUnreachable,
		"no healthy backend endpoint accepted the connection")
}

// sendFailed handles an error after the request may have reached the engine:
// it is never replayed.
func (rt *Runtime) sendFailed(x *exchange, c *compiled, i int, err error) {
	clientGone := x.r.Context().Err() != nil
	if c.cb.enabled {
		c.recordBreaker(i, c.eps[i].br.onAbandon(&c.cb, clientGone))
	}
	switch {
	case clientGone:
		c.countRequest(i, statusClientClosed, codeClientClosed)
	case errors.Is(err, os.ErrDeadlineExceeded):
		rt.fail(x, c, i, http.StatusGatewayTimeout, CodeUpstreamTimeout, "the engine did not answer in time")
	default:
		rt.log.WithFields(logrus.Fields{"rule": c.label, "endpoint": c.eps[i].id, "error": err.Error()}).Warn("engine request failed after sending")
		rt.fail(x, c, i, http.StatusBadGateway, CodeUpstreamError, "the engine connection failed")
	}
}

// relay copies the engine's response to the client: status and headers as
// the engine sent them, then the body, flushed per read for SSE (and any
// response of unknown length) so events are never buffered. Engine silence
// is bounded by a read deadline moved forward on every read: idle for plain
// bodies, StreamIdleTimeout inside SSE, capped by the stream's end time.
func (rt *Runtime) relay(x *exchange, c *compiled, i int, idle time.Duration, resp *http.Response, parsedInto bool) {
	defer func() {
		c.eps[i].active.Add(-1)
		c.epm[i].active.Dec()
	}()
	defer resp.Body.Close()
	if c.cb.enabled {
		c.recordBreaker(i, c.eps[i].br.onResponse(&c.cb, resp.StatusCode))
	}
	ub, _ := resp.Body.(*upBody)
	sse := strings.HasPrefix(resp.Header.Get(headerContentType), contentTypeSSE)
	var capAt time.Time // zero: no cap
	if sse {
		idle = rt.opts.StreamIdleTimeout
		capD := c.rule.MaxStreamDuration
		if capD <= 0 {
			capD = rt.opts.MaxStreamDuration
		}
		capAt = x.start.Add(capD)
	}
	extend := func() {
		if ub == nil || ub.buffered() {
			return // no read can block: the rest of the body is in memory
		}
		d := time.Now().Add(idle)
		if !capAt.IsZero() && capAt.Before(d) {
			d = capAt
		}
		ub.setReadDeadline(d)
	}
	extend()

	h := x.w.Header()
	if !parsedInto { // else the engine's headers are already in h
		for k, vv := range resp.Header {
			h[k] = vv
		}
	}
	for _, k := range hopHeaders {
		delete(h, k)
	}
	if !parsedInto { // else h kept the client's id and dropped the engine's
		h[HeaderRequestID] = []string{x.requestID} // the client's id, even if the engine minted its own
	}
	x.wroteHeader = true
	x.w.WriteHeader(resp.StatusCode)
	c.ttfb.Observe(time.Since(x.start).Seconds())

	flush := sse || resp.ContentLength < 0
	fl, _ := x.w.(http.Flusher)
	if flush && fl != nil {
		fl.Flush()
	}
	bp := rt.bufs.Get().(*[]byte)
	defer rt.bufs.Put(bp)
	buf := *bp
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if rerr == nil {
				extend()
			}
			if _, werr := x.w.Write(buf[:n]); werr != nil {
				c.countRequest(i, statusClientClosed, codeClientClosed)
				return // client gone; closing the body closes the engine connection
			}
			if flush && fl != nil {
				fl.Flush()
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			timedOut := errors.Is(rerr, os.ErrDeadlineExceeded)
			switch {
			case x.r.Context().Err() != nil:
				c.countRequest(i, statusClientClosed, codeClientClosed)
				return
			case sse && timedOut && !time.Now().Before(capAt):
				_, _ = io.WriteString(x.w, sseStreamCappedLine)
				if fl != nil {
					fl.Flush()
				}
				c.countRequest(i, resp.StatusCode, CodeStreamCapped)
				c.latency.Observe(time.Since(x.start).Seconds())
				return
			}
			code := CodeUpstreamError
			if timedOut {
				code = CodeUpstreamTimeout
			}
			c.countRequest(i, resp.StatusCode, code)
			rt.log.WithFields(logrus.Fields{"rule": c.label, "endpoint": c.eps[i].id, "error": rerr.Error()}).Warn("engine response cut")
			// A clean end would make a truncated body look complete.
			panic(http.ErrAbortHandler)
		}
	}
	c.countRequest(i, resp.StatusCode, "")
	c.latency.Observe(time.Since(x.start).Seconds())
}

// SendUpstream sends req to ep over the datapath's upstream connection pool
// and returns the engine's response (the caller must read the body to the end
// or close it). The request line uses req.URL's path and query; Host is the
// endpoint's address; req.Body, when set, is read fully first. A connect
// failure is a *DialError (NotSent() == true): the engine never saw the
// request, so it may be sent elsewhere. Any other error means it may have.
// The P/D sequences use this to send their legs.
func (rt *Runtime) SendUpstream(ctx context.Context, ep spec.Endpoint, req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("reading leg body for %s: %w", ep.ID, err)
		}
		body = b
	}
	out := *req
	out.RequestURI = "" // always build the request line from URL
	resp, err := rt.up.roundTrip(ctx, ep.ID, nil, &out, body, 0, nil)
	if err != nil {
		var de *DialError
		if errors.As(err, &de) {
			return nil, de
		}
		return nil, fmt.Errorf("send to %s: %w", ep.ID, err)
	}
	return resp, nil
}

// SendLeg is SendUpstream for a leg whose body is already in memory (the P/D
// sequences' pd.Leg: endpoint, path, header, body), without re-reading it.
// path is the request target ("/v1/completions", optionally with a query).
// Errors are as for SendUpstream; a nil body sends Content-Length: 0 on POST.
func (rt *Runtime) SendLeg(ctx context.Context, ep spec.Endpoint, method, path string, h http.Header, body []byte) (*http.Response, error) {
	return rt.sendLeg(ctx, nil, ep, method, path, h, body)
}

// sendLeg is SendLeg over tc (nil: plaintext), the rule's TLS to engines.
func (rt *Runtime) sendLeg(ctx context.Context, tc *upTLS, ep spec.Endpoint, method, path string, h http.Header, body []byte) (*http.Response, error) {
	if h == nil {
		h = http.Header{}
	}
	req := &http.Request{Method: method, URL: &url.URL{Path: path}, RequestURI: path, Header: h, Host: ep.ID}
	resp, err := rt.up.roundTrip(ctx, ep.ID, tc, req, body, 0, nil)
	if err != nil {
		var de *DialError
		if errors.As(err, &de) {
			return nil, de
		}
		return nil, fmt.Errorf("send leg to %s: %w", ep.ID, err)
	}
	return resp, nil
}

// prepareOutboundHeader strips hop-by-hop headers (and those named in
// Connection) and appends the client to X-Forwarded-For. It edits the
// inbound header in place: the handler owns it and it is reused by retries.
func prepareOutboundHeader(h http.Header, client string) {
	for _, v := range h[headerConnection] {
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				h.Del(f)
			}
		}
	}
	for _, k := range hopHeaders {
		delete(h, k)
	}
	if client == "" {
		return
	}
	if prior := h[headerForwardedFor]; len(prior) > 0 {
		h[headerForwardedFor] = []string{strings.Join(prior, ", ") + ", " + client}
	} else {
		h[headerForwardedFor] = []string{client}
	}
}

// sessionKey extracts the sel-3 persistence key; "" when the request has none.
func (c *compiled) sessionKey(r *http.Request, client string) string {
	s := c.rule.Session
	switch s.Source {
	case spec.SessionFromHeader:
		if v := r.Header[c.sessionHeader]; len(v) > 0 {
			return v[0]
		}
	case spec.SessionFromCookie:
		if ck, err := r.Cookie(s.Name); err == nil {
			return ck.Value
		}
	case spec.SessionFromQuery:
		return r.URL.Query().Get(s.Name)
	case spec.SessionFromSourceIP:
		return client
	}
	return ""
}

// clientIP returns the host part of a RemoteAddr ("ip:port" or "[v6]:port").
func clientIP(remote string) string {
	i := strings.LastIndexByte(remote, ':')
	if i < 0 {
		return remote
	}
	return strings.Trim(remote[:i], "[]")
}

// newRequestID mints a request id: 32 lowercase hex digits (128 random bits).
func newRequestID() string {
	var raw [16]byte
	a, b := rand.Uint64(), rand.Uint64()
	for k := range 8 {
		raw[k] = byte(a >> (8 * k))
		raw[8+k] = byte(b >> (8 * k))
	}
	var out [32]byte
	hex.Encode(out[:], raw[:])
	return string(out[:])
}

func strconvQuote(s string) string {
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return strconv.Quote(s)
}
