package datapath

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/infergate/infergate/datapath/clienterr"
	"github.com/infergate/infergate/datapath/h1"
	"github.com/infergate/infergate/datapath/hop"
	"github.com/infergate/infergate/datapath/pick"
	"github.com/infergate/infergate/datapath/reqbody"
	"github.com/infergate/infergate/datapath/respclock"
	"github.com/infergate/infergate/datapath/sockio"
	"github.com/infergate/infergate/datapath/streambound"
	"github.com/infergate/infergate/datapath/upstream"
	"github.com/infergate/infergate/spec"
	"github.com/sirupsen/logrus"
)

// Wire names the proxy reads or rewrites.
const (
	fieldModel           = "model" // body field used for model routing
	headerForwardedFor   = "X-Forwarded-For"
	headerConnection     = "Connection"
	headerContentType    = "Content-Type"
	headerRetryAfter     = "Retry-After"
	retryAfterOverloaded = "1" // seconds: body memory frees as requests finish
	contentTypeJSON      = "application/json"
	contentTypeSSE       = "text/event-stream"
	maxClientRequestID   = 128 // longer client ids are replaced
	statusClientClosed   = 499 // metrics only: the client went away
	codeClientClosed     = "client_closed"
	sseStreamCappedLine  = "data: {\"error\":\"max_stream_duration_exceeded\"}\n\n"
	// oneWriteBody bounds a body copyBody may time by the head's reading:
	// one that the front ends buffer whole (h1's write buffer is 4 KiB,
	// net/http's body buffer 2 KiB), so writing it waits on no socket.
	oneWriteBody = 2 << 10
)

// exchange is one client request in flight.
type exchange struct {
	w           http.ResponseWriter
	r           *http.Request
	start       time.Time
	startMono   sockio.Mono // start as a Mono (startAt); NoDeadline: not converted yet
	end         time.Time   // when the answer was done (finished; total: its time since start); zero: not yet
	total       time.Duration
	requestID   string
	wroteHeader bool
	// parsedHopFree: the front end's parser stored no hop-by-hop field in
	// the request's header (h1.Arrival.HopFree). (Beside wroteHeader, in
	// its padding, as the flags below: the exchange keeps its size class.)
	parsedHopFree bool
	// arrivedWhole: the front end had the request's body whole when it
	// took start (requestStart), so until the exchange goes out nothing
	// but the handler's own work came between (serveSingle).
	arrivedWhole bool
	// lineChecked: the front end refused every request line
	// checkRequestLine refuses (h1.Arrival.LineChecked), so serve skips it.
	lineChecked bool
	// idRepeated: the client sent its request id (the one kept) with more
	// values after it, which serveSingle drops (serve saw them, so
	// serveSingle need not look the field up again).
	idRepeated bool
	// idMinted: serve minted the request id and left it out of r.Header
	// (idIntoHeader puts it in for the paths that forward or read the map).
	idMinted bool
	// body is the request body when it was read for routing (reqbody:
	// charged to the in-flight budget until ServeHTTP returns).
	body reqbody.Body
	// obs gathers the access line, latency histograms and trace (observe.go).
	obs reqObs
	// key is the request's API-key admission (nil: the rule has no keys).
	key *keyCheck
	// placed is the cost model's record of this request's placement; the
	// relay reports a streamed answer's first token to it (learning).
	placed *pick.Placed
	// Backing arrays of the one-value header slices the gateway sets (the
	// request id on the request and the response, X-Forwarded-For): the
	// exchange is allocated anyway, so they cost no allocation of their own.
	ids [2]string
	xff [1]string
	// mint spells this exchange's request ids in batches (requestid.go);
	// newExchange keeps it when it recycles the exchange. Nil: one id at
	// a time.
	mint *idMint
	// The streamed client body (clientStream) lives here for the same
	// reason: it was an allocation of its own.
	streamed streamedBody
}

// ServeHTTP is the entry of every data request on the listener: request id,
// API check, body, rule match, then the rule's handler (serve). Its
// deferred calls are here, in a function with one return, so the compiler
// inlines them (open-coded defers); among serve's many returns they were
// pushed on the defer chain and walked at each return.
func (ln *listener) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt := ln.rt
	x := newExchange(w) // empty
	x.w, x.r = w, r
	arr, parsed := requestStart(w)
	x.start, x.arrivedWhole, x.lineChecked, x.parsedHopFree = arr.Start, arr.BodyWhole, arr.LineChecked, arr.HopFree
	rt.observeBegin(x)
	defer rt.observeEnd(x) // after recoverPanic: a panic's 500 is logged
	defer rt.recoverPanic(x)
	defer func() { x.body.Release() }() // a body read for routing returns its budget
	ln.serve(x, w, parsed)
}

// scratchWriter is a front end's ResponseWriter that carries a slot for
// the handler's per-request state from request to request (h1: with its
// own request state, given back once the response is finished).
type scratchWriter interface{ Scratch() *any }

// newExchange returns an empty exchange for the request w answers: the
// one an earlier request left in w's scratch slot, else a new one. Safe
// because nothing holds an exchange once ServeHTTP has returned (the rule
// and its audit: docs/datapath.md, "What a request leaves behind"), and
// the slot is reused only after the front end finished the response, which
// may still read header values whose backing arrays are in the exchange
// (ids, xff).
func newExchange(w http.ResponseWriter) *exchange {
	sw, ok := w.(scratchWriter)
	if !ok {
		return new(exchange)
	}
	p := sw.Scratch()
	if x, ok := (*p).(*exchange); ok {
		m := x.mint
		*x = exchange{} // in place (a literal with fields is built on the stack, then copied)
		x.mint = m
		return x
	}
	x := &exchange{mint: new(idMint)}
	*p = x
	return x
}

// Poison makes a finished exchange unusable, for a front end that poisons
// finished requests (h1 under -race): a late use of its writer panics,
// and its fields read as nothing.
func (x *exchange) Poison() {
	*x = exchange{w: poisonedWriter{}, r: &http.Request{Method: h1.PoisonMethod, URL: &url.URL{}, Header: http.Header{}}}
}

// poisonedWriter is a finished exchange's ResponseWriter (Poison).
type poisonedWriter struct{}

func (poisonedWriter) Header() http.Header       { panic(errUsedAfterReturn) }
func (poisonedWriter) Write([]byte) (int, error) { panic(errUsedAfterReturn) }
func (poisonedWriter) WriteHeader(int)           { panic(errUsedAfterReturn) }

var (
	errUsedAfterReturn = errors.New("datapath: an exchange used after its handler returned")

	_ h1.Poisoner = (*exchange)(nil)
)

// arrivedWriter is a front end's ResponseWriter that reports what it
// knew of the request as it handed it over (h1.ResponseWriter.Arrived).
type arrivedWriter interface{ Arrived() h1.Arrival }

// parsedWriter is an arrivedWriter that also reports which common names
// its parser stored in the request's header (h1's): one type assertion
// for both (a second was ~200 instructions a request, in getitab).
type parsedWriter interface {
	arrivedWriter
	Fields() h1.Fields
}

// requestStart is what the front end knew of the request as it handed it
// over, its Start always set: the front end's own clock reading when it
// took one, else a new one. Why: at ~70 ns a reading on this kind of
// host, the eleven readings of a small proxied request were ~3 % of the
// gateway's CPU, and h1 had read the clock a microsecond before. Its
// BodyWhole, LineChecked and HopFree are h1's (false for any other front
// end), and so are the Fields (the zero Fields, which lacks nothing, for
// any other front end).
func requestStart(w http.ResponseWriter) (arr h1.Arrival, f h1.Fields) {
	// Each writer's methods are called through the interface it was
	// asserted to: converting a parsedWriter to an arrivedWriter was an
	// itab lookup of its own, which missed the runtime's cache on every
	// request (~100 instructions).
	if p, ok := w.(parsedWriter); ok {
		arr, f = p.Arrived(), p.Fields()
	} else if a, ok := w.(arrivedWriter); ok {
		arr = a.Arrived()
	}
	if arr.Start.IsZero() {
		arr = h1.Arrival{Start: time.Now()}
	}
	return arr, f
}

// endedWriter is a front end's ResponseWriter that takes the moment its
// answer ended (h1: its idle mark and deadline then need no clock reading
// of their own).
type endedWriter interface {
	EndedAt(time.Time, sockio.Mono)
}

// direct is the writer x.w's bytes reach unchanged: the one the timing
// wrapper wraps when x.w is that wrapper itself (it only counts and
// times them), else x.w. Any other writer in between may change what it
// is given, so it is not looked through.
func (x *exchange) direct() http.ResponseWriter {
	if x.w == http.ResponseWriter(&x.obs.clock) {
		return x.obs.clock.ResponseWriter
	}
	return x.w
}

// idIntoHeader puts a minted request id into r.Header (replacing any
// over-long one the client sent), for the engine requests sent from the
// map and its readers. Why not in serve: the usual engine request goes as
// a list that names the id itself (upstream.HeadList.RequestID), and the
// map insert cost ~135 instructions a request (callgrind).
func (x *exchange) idIntoHeader() {
	if x.idMinted {
		x.idMinted = false
		x.r.Header[HeaderRequestID] = x.ids[0:1:1]
	}
}

// startAt is x.start as a sockio.Mono, converted at its first use: Send's
// header wait and the relay's stream bound both count from it. Why: each
// converted the start (or a reading made from it) on its own, ~47
// instructions a conversion (callgrind).
func (x *exchange) startAt() sockio.Mono {
	if x.startMono == sockio.NoDeadline {
		x.startMono = sockio.MonoOf(x.start)
	}
	return x.startMono
}

// finished marks the request's end (the access line, spans and the front
// end take it too) and returns its latency.
func (x *exchange) finished() time.Duration { return x.finishedAt(x.obs.clock.NowSince()) }

// finishedAt is finished with the end read already (copyBody's shared
// reading) and its time since the start, which the clock's NowSince gave
// with the reading: no Time.Sub here, nor in observeEnd, which takes it.
func (x *exchange) finishedAt(end time.Time, total time.Duration) time.Duration {
	x.end, x.total = end, total
	if e, ok := x.obs.clock.Unwrap().(endedWriter); ok {
		e.EndedAt(x.end, x.startAt().Add(total)) // end's Mono: end is the start plus total
	}
	return total
}

// The h1.Fields of the names serve asks about (read-only after package
// initialisation).
var (
	parsedRequestID = h1.FieldOf(HeaderRequestID)
	parsedModel     = h1.FieldOf(HeaderModel)
	parsedUpgrade   = h1.FieldOf(headerUpgrade)
)

// serve is ServeHTTP's request: checks, rule match, gates, then the rule's
// handler. w is the client's ResponseWriter as the server gave it (x.w is
// the timing wrapper around it). parsed is what the front end's parser
// stored in r.Header: until serve adds a field, a name it lacks needs no
// lookup (most requests carry neither a request id nor X-Model).
func (ln *listener) serve(x *exchange, w http.ResponseWriter, parsed h1.Fields) {
	rt, r := ln.rt, x.r
	if rt.hookServe != nil {
		rt.hookServe(r)
		parsed = h1.Fields{} // the hook may have edited the header
	}

	// Both front ends store canonical keys: the id is read and set without
	// Header.Get/Set canonicalising the name again, and its one-value
	// slices (request and response) live in the exchange.
	var rid string
	if !parsed.Lacks(parsedRequestID) {
		if v := r.Header[HeaderRequestID]; len(v) > 0 {
			rid, x.idRepeated = v[0], len(v) > 1
		}
	}
	model := "" // X-Model, read here while parsed holds
	if !parsed.Lacks(parsedModel) {
		model = canonicalGet(r.Header, HeaderModel)
	}
	if rid == "" || len(rid) > maxClientRequestID {
		rid = x.mint.next()
		x.ids[0] = rid
		x.idRepeated, x.idMinted = false, true
	}
	x.ids[1] = rid
	if !takesFields(x) {
		// A writer that takes the engine's fields as pairs gets the id
		// with them (relayAnswer), and every other answer sets it where
		// its head is made (fail, relayAnswer): in the map here it was
		// put in only to be deleted again (~200 instructions).
		w.Header()[HeaderRequestID] = x.ids[1:2:2]
	}
	x.requestID = rid
	ln.setHSTS(w, r) // TLS listeners only

	// The path is checked before anything else reads it (the allowlist, the
	// rule match, every serve path): a request whose path would mean
	// something else once normalised is never routed.
	if !x.lineChecked { // h1 refused these lines itself (FuzzRequestLineH1)
		if code, msg := checkRequestLine(r); code != "" {
			rt.fail(x, nil, -1, http.StatusBadRequest, code, msg)
			return
		}
	}
	if code, msg := checkPathShape(r); code != "" {
		rt.fail(x, nil, -1, http.StatusBadRequest, code, msg)
		return
	}
	if !parsed.Lacks(parsedUpgrade) && isUpgrade(r) {
		rt.fail(x, nil, -1, http.StatusNotImplemented, CodeUpgradeRefused,
			"protocol upgrades ("+strconvQuote(r.Header.Get(headerUpgrade))+") are not proxied; use the engine's HTTP APIs")
		return
	}
	t := ln.table.Load()
	var body []byte
	if bodyForMatch(t, r) {
		if body = rt.readBodyOrFail(x); body == nil {
			return
		}
	}
	if model == "" && len(body) > 0 {
		m, err := bodyModel(body)
		if err != nil {
			rt.fail(x, nil, -1, http.StatusBadRequest, CodeInvalidJSON, "request body is not valid JSON: "+err.Error())
			return
		}
		model = m
	}
	rs := t.route(r.Host, r.URL.Path, model)
	if rs == nil {
		msg := "no rule on this address matches host " + strconvQuote(hostOnly(r.Host)) + ", path " + strconvQuote(r.URL.Path)
		if model != "" {
			msg += ", model " + strconvQuote(model)
		}
		rt.fail(x, nil, -1, http.StatusNotFound, CodeNoMatchingRule, msg)
		return
	}
	c := rs.cur.Load()
	x.obs.matched(c, model)
	if !ln.siteServes(x, c) { // TLS: the handshake's site must be the rule's
		return
	}
	if c.rule.AdminDown {
		rt.fail(x, c, -1, http.StatusServiceUnavailable, CodeAdminDown,
			"this service is administratively down (adminStateUp is false)")
		return
	}
	if c.admin.denies(r.URL.Path) {
		rt.fail(x, c, -1, http.StatusForbidden, CodeAdminPathDenied,
			"path "+strconvQuote(r.URL.Path)+" is an engine admin API; this rule does not forward it (allow_admin_paths)")
		return
	}
	if !pathAllowed(c.rule.AllowedPaths, r.URL.Path) {
		rt.fail(x, c, -1, http.StatusNotFound, CodePathNotAllowed,
			"path "+strconvQuote(r.URL.Path)+" is not in this rule's allowed_paths")
		return
	}
	if body == nil && c.bodyForRule(r) { // other bodies stream through unread
		if body = rt.readBodyOrFail(x); body == nil {
			return
		}
	}
	if c.keys {
		rt.serveKeyed(x, c, body)
		return
	}
	rt.dispatch(x, c, body)
}

// serveKeyed admits a request on a rule with API keys (401/403/429 before
// any engine is contacted), dispatches it, and settles the key's
// reservation when it ends.
func (rt *Runtime) serveKeyed(x *exchange, c *compiled, body []byte) {
	k, b, ok := rt.admitKey(x, c, body)
	if !ok {
		return
	}
	defer rt.finishKey(k)
	x.key = k
	rt.dispatch(x, c, b)
}

// dispatch hands a matched, admitted request to its rule's handler.
func (rt *Runtime) dispatch(x *exchange, c *compiled, body []byte) {
	if body == nil {
		rt.liftReadDeadlineIfNoBody(x)
	}
	if c.rule.PD != nil {
		rt.servePD(x, c, body)
		return
	}
	rt.serveSingle(x, c, body)
}

// readBodyOrFail reads the whole body for routing; nil means the client has
// been answered (an empty body is returned as a non-nil empty slice).
func (rt *Runtime) readBodyOrFail(x *exchange) []byte {
	rb, status, code, msg := rt.readBody(x.w, x.r)
	if status != 0 {
		rt.fail(x, nil, -1, status, code, msg)
		return nil
	}
	x.body = rb
	body := x.body.Bytes()
	if body == nil {
		body = []byte{}
	}
	return body
}

// liftReadDeadlineIfNoBody lifts the client read deadline when nothing is
// left to read; a body that streams through moves it itself.
func (rt *Runtime) liftReadDeadlineIfNoBody(x *exchange) {
	if !hasBody(x.r) {
		rt.liftReadDeadline(x.w)
	}
}

// clientStream is the client's body as an upstream.BodyStream, or nil when
// the body was read (body != nil) or there is none. A Content-Length over
// MaxStreamedBodyBytes is refused up front (413).
func (rt *Runtime) clientStream(x *exchange, body []byte) (*upstream.BodyStream, bool) {
	r := x.r
	if body != nil || !hasBody(r) {
		return nil, true
	}
	max := rt.opts.MaxStreamedBodyBytes
	if max > 0 && r.ContentLength > max {
		x.w.Header().Set(headerConnection, "close")
		return nil, false
	}
	b := &x.streamed
	b.s = upstream.BodyStream{R: r.Body, N: r.ContentLength, Max: max, Idle: rt.opts.BodyStallTimeout}
	if d := rt.opts.BodyReadTimeout; d > 0 {
		// Over the writer the clock wraps (direct): the controller's walk
		// to the deadline setter then starts at it.
		b.r, b.rc, b.per = r.Body, *http.NewResponseController(x.direct()), d
		// The whole body's cap as the start and a duration: ChunkRead
		// adds them only when a chunk is read, which a body that comes
		// whole with its head never is (a Time.Add per request, ~75
		// instructions, callgrind).
		b.start, b.whole = &x.start, rt.opts.StreamedBodyTimeout
		b.s.R = b
		b.s.Progress = b
	}
	return &b.s, true
}

// streamedBody is a client body streamed to the engine under the client
// read deadline, in one allocation (it is its own Progress too). The
// read deadline bounds the client's delivery only: once the body has ended
// (io.EOF) it is lifted before the engine is waited on. Left in place it
// would race the first-byte bound, and net/http's background read, timing
// out, cancels the request as if the client had gone: the client got a 200
// with an empty body instead of 504.
type streamedBody struct {
	s     upstream.BodyStream
	r     io.Reader // the client's body
	rc    http.ResponseController
	per   time.Duration // the deadline moves this far past each chunk
	start *time.Time    // the request's start (the exchange's)
	whole time.Duration // cap on the whole body from start; zero or less: none
	ended bool          // the deadline is lifted for good
}

func (b *streamedBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF && !b.ended {
		b.ended = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// ChunkRead moves the read deadline past a chunk read (BodyStream.Progress).
func (b *streamedBody) ChunkRead() {
	if b.ended {
		return // lifted for good; do not set it again
	}
	dl := time.Now().Add(b.per)
	if b.whole > 0 {
		if end := b.start.Add(b.whole); end.Before(dl) {
			dl = end
		}
	}
	_ = b.rc.SetReadDeadline(dl)
}

// fail answers a gateway error and counts it (c nil: no rule matched).
func (rt *Runtime) fail(x *exchange, c *compiled, ep, status int, code, msg string) {
	if !x.wroteHeader {
		x.wroteHeader = true
		if h := x.w.Header(); x.ids[1] != "" && len(h[HeaderRequestID]) == 0 {
			h[HeaderRequestID] = x.ids[1:2:2] // serve left it to the head's maker
		}
		clienterr.Write(x.w, status, code, msg)
	}
	if c == nil {
		rt.m.Requests.WithLabelValues("", "", strconv.Itoa(status), code).Inc()
		return
	}
	c.countRequest(ep, status, code)
	c.latency.Observe(x.finished().Seconds())
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
// dial-failure retries) bounded by MaxBodyBytes, into memory that grows as
// bytes arrive and is charged to the in-flight body budget (reqbody). The
// caller releases the returned Body when the request ends.
func (rt *Runtime) readBody(w http.ResponseWriter, r *http.Request) (reqbody.Body, int, string, string) {
	limit := rt.opts.MaxBodyBytes
	// A failed read leaves the connection unusable; "Connection: close" also
	// stops net/http from draining the rest of the body before answering.
	failed := func(status int, code, msg string) (reqbody.Body, int, string, string) {
		w.Header().Set(headerConnection, "close")
		return reqbody.Body{}, status, code, msg
	}
	if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
		rt.liftReadDeadline(w)
		return reqbody.Body{}, 0, "", ""
	}
	// A client that stops sending mid-body must not pin the handler: the
	// listener's ReadTimeout (BodyReadTimeout) is the read deadline here.
	// It is lifted after a good read (long SSE responses follow) and kept
	// after a failed one.
	b, err := rt.bodies.Read(r.Body, r.ContentLength, limit)
	switch {
	case errors.Is(err, reqbody.ErrTooLarge):
		return failed(http.StatusRequestEntityTooLarge, CodeBodyTooLarge,
			"request body exceeds the limit of "+strconv.FormatInt(limit, 10)+" bytes")
	case errors.Is(err, reqbody.ErrOverloaded):
		w.Header().Set(headerRetryAfter, retryAfterOverloaded)
		return failed(http.StatusServiceUnavailable, CodeOverloaded,
			"the gateway is holding too many request bodies; retry shortly")
	case err != nil:
		return failed(http.StatusBadRequest, CodeBadRequestBody, "reading request body: "+err.Error())
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
	if x.idRepeated {
		// The engine gets the one id the client is answered with: a second
		// value (of any length) would be a different id in its logs. (P/D
		// rules refuse or replace every value in guardPDRequest.)
		x.r.Header[HeaderRequestID] = x.r.Header[HeaderRequestID][:1]
	}
	// The parse's hop-free mark holds only here, not on the P/D paths into
	// serveSingleExcl: between the parse and this point the handler set
	// nothing in r.Header but the request id, while a dialect may have
	// handled the header since.
	rt.serveSingleExcl(x, c, body, 0, singleSend{atStart: sentAtStart(x, c), hopFree: x.parsedHopFree})
}

// singleSend is what serveSingle knows of its request that the P/D paths
// into serveSingleExcl do not (their zero value: neither holds).
type singleSend struct {
	// atStart: the first try's first-byte bound counts from the request's
	// start (sentAtStart; the P/D legs took time).
	atStart bool
	// hopFree: the outbound header holds no hop-by-hop field, so it needs
	// no hop.Strip (the front end's parse vouched for it, and the handler
	// added only the request id since).
	hopFree bool
}

// sentAtStart reports whether a single-pool request's start stands for
// the moment its first try goes out, for its engine's first-byte bound
// (upstream.Leg.From): its body arrived whole (nothing to wait for from
// the client) and no flow-control queue waits before the send (such a
// rule reads the clock after its wait anyway). The bound then counts from
// up to the handler's own time earlier, microseconds against a bound of
// seconds. False: Send reads the clock (a body read from the client may
// have taken any time since the start).
func sentAtStart(x *exchange, c *compiled) bool {
	return x.arrivedWhole && c.fq == nil
}

// serveSingleExcl is serveSingle over the endpoints outside excl (a P/D
// rule's body-less relay and role-0 fallback restrict it to one role,
// and pass a zero singleSend).
func (rt *Runtime) serveSingleExcl(x *exchange, c *compiled, body []byte, excl uint64, ss singleSend) {
	r := x.r
	if c.sessionHeader == HeaderRequestID { // a session keyed on the request id
		x.idIntoHeader()
	}
	f := c.poolFacts(r, body)
	list := rt.outboundList(x, c, ss.hopFree, f.ClientIP)
	if list.Names == nil {
		x.idIntoHeader()
		prepareOutboundHeaderIn(r.Header, !ss.hopFree, f.ClientIP, rt.opts.TrustForwardedFor, &x.xff)
	}

	// Timeouts are read deadlines on the engine connection (no per-request
	// timer or derived context); the client's context still aborts the
	// exchange at once when the client goes away.
	ctx := r.Context()
	quiet := rt.silenceFor(c.rule)

	// The engine's headers are parsed straight into the client's header map
	// when it holds nothing but the request id (the usual case), or, when
	// the client's writer takes them so, kept as pairs for its head
	// (takesFields, relayAnswer).
	var into http.Header
	var pairs bool
	if h := x.w.Header(); len(h) == 0 || len(h) == 1 && len(h[HeaderRequestID]) == 1 {
		into = h
		pairs = takesFields(x)
	}

	target := r.RequestURI // the client's request target, path and query as sent
	if target == "" || target[0] != '/' {
		target = r.URL.RequestURI()
	}
	stream, ok := rt.clientStream(x, body)
	if !ok {
		rt.fail(x, c, -1, http.StatusRequestEntityTooLarge, CodeBodyTooLarge,
			"request body exceeds the streaming limit of "+strconv.FormatInt(rt.opts.MaxStreamedBodyBytes, 10)+" bytes")
		return
	}
	attempts := 0
	var held heldSlots // admission window slots (flowgate.go)
	defer held.release()
	for attempts < len(c.eps) {
		var i int
		var shed bool
		x.placed.Done(0) // a failed attempt's booking (nil-safe)
		if i, excl, x.placed, shed = rt.chooseAdmitted(x, c, &f, body, excl, attempts == 0, &held); shed {
			return
		}
		if i < 0 {
			break
		}
		attempts++
		ep := c.eps[i]
		x.obs.endpoint = i
		ep.active.Add(1)
		c.epm[i].active.Inc()
		var sent time.Time   // flow control's dispatch → first byte (flowgate.go)
		var from sockio.Mono // NoDeadline: Send reads the clock
		if c.fq != nil {
			sent = time.Now()
			from = sockio.MonoOf(sent)
		} else if ss.atStart && attempts == 1 { // a retry follows a failed dial, which took its time
			from = x.startAt()
		}
		resp, err := rt.sender.Send(ctx, upstream.Leg{
			Endpoint: c.rule.Endpoints[i], Method: r.Method, Path: target, Header: r.Header, List: list,
			Body: body, Stream: stream, TLS: c.up, HeaderWait: quiet.firstByte, Into: into,
			Fields: pairs, From: from,
		})
		if err != nil {
			ep.active.Add(-1)
			c.epm[i].active.Dec()
			if upstream.NotSent(err) && ctx.Err() == nil {
				if c.cb.enabled {
					c.recordBreaker(i, ep.br.onDialFailure(&c.cb))
				}
				excl |= bit(i)
				held.release()
				rt.m.Retries.WithLabelValues(c.label).Inc()
				rt.log.WithFields(logrus.Fields{"rule": c.label, "endpoint": ep.id, "error": err.Error()}).Debug("dial failed; trying another endpoint")
				continue
			}
			if rt.poolWaitFailed(x, c, i, err) { // poolwait.go: nothing was sent
				return
			}
			ep.requests.Add(1) // it may have reached the engine
			ep.bytes.Add(requestBytes(body, stream))
			// net/http cancels ctx on a failed body read, so ctx cannot tell a
			// stalled client from a gone one here: answer; a gone client
			// never reads it.
			var cbe *upstream.ClientBodyError
			if errors.As(err, &cbe) {
				rt.clientBodyFailed(x, c, i, cbe)
				return
			}
			rt.sendFailed(x, c, i, err)
			return
		}
		ep.requests.Add(1)
		ep.bytes.Add(requestBytes(body, stream))
		if c.fq != nil && resp.StatusCode == http.StatusOK {
			c.noteLead(time.Since(sent))
		}
		if stream != nil && !x.streamed.ended {
			// A streamed body read to its end has lifted the deadline
			// already (streamedBody.Read): a second lift was a type walk
			// and a socket deadline update per request.
			rt.liftReadDeadline(x.w)
		}
		if attempts > 1 {
			rt.m.Failover.WithLabelValues(c.label).Inc()
		}
		rt.relay(x, c, i, quiet, resp, into != nil)
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

// clientBodyFailed answers a streamed body the client did not deliver
// (400) or that ran over the streaming limit (413). The engine saw a cut
// request, not its fault: the breaker is not fed.
func (rt *Runtime) clientBodyFailed(x *exchange, c *compiled, i int, e *upstream.ClientBodyError) {
	x.w.Header().Set(headerConnection, "close")
	if e.TooLarge {
		rt.fail(x, c, i, http.StatusRequestEntityTooLarge, CodeBodyTooLarge,
			"request body exceeds the streaming limit of "+strconv.FormatInt(rt.opts.MaxStreamedBodyBytes, 10)+" bytes")
		return
	}
	rt.fail(x, c, i, http.StatusBadRequest, CodeBadRequestBody, e.Error())
}

// sendFailed handles an error after the request may have reached the engine:
// it is never replayed. An engine that took the request and stayed silent
// past the first-byte bound feeds the 5xx streak as a 504 (as P/D legs do):
// a wedged engine whose probe still passes must trip its breaker.
func (rt *Runtime) sendFailed(x *exchange, c *compiled, i int, err error) {
	clientGone := x.r.Context().Err() != nil
	if c.cb.enabled {
		if !clientGone && errors.Is(err, os.ErrDeadlineExceeded) {
			c.recordBreaker(i, c.eps[i].br.onResponse(&c.cb, http.StatusGatewayTimeout))
		} else {
			c.recordBreaker(i, c.eps[i].br.onAbandon(&c.cb, clientGone))
		}
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
// is bounded by a read deadline moved forward on every read: the body stall
// bound for plain bodies, the stream idle bound inside SSE, capped by the
// stream's end time. An SSE body on a plaintext engine connection relays
// itself from inside the engine socket's read wait (relaystream.go: no
// empty read before each wait); everything else goes through copyBody.
//
// Its deferred calls are here, in a function with one return, so the
// compiler open-codes them; among relayAnswer's returns they were pushed
// on the defer chain and walked at the end of every request.
func (rt *Runtime) relay(x *exchange, c *compiled, i int, quiet silence, resp *http.Response, parsedInto bool) {
	// The client's writes are bounded as the engine's reads are
	// (streambound): a client that stops reading, its connection open,
	// holds a body no longer than a silent engine would, SSE or not.
	// Cleared at the end for the connection's next request.
	var bound streambound.Bound
	var relayed uint64 // the endpoint counter's bytes, added once at the end
	// relay's ends in one deferred call, in the order four defers ran
	// them: each defer cost ~30 instructions a request of its own (its
	// wrapper and frame, callgrind).
	defer func() {
		c.eps[i].bytes.Add(relayed)
		bound.Clear()
		_ = resp.Body.Close()
		c.eps[i].active.Add(-1)
		c.epm[i].active.Dec()
	}()
	rt.relayAnswer(x, c, i, quiet, resp, parsedInto, &bound, &relayed)
}

// relayAnswer is relay's work: bound and relayed are relay's, which
// clears the one and counts the other when it returns.
func (rt *Runtime) relayAnswer(x *exchange, c *compiled, i int, quiet silence, resp *http.Response, parsedInto bool, bound *streambound.Bound, relayed *uint64) {
	if c.cb.enabled {
		c.recordBreaker(i, c.eps[i].br.onResponse(&c.cb, resp.StatusCode))
	}
	ub, _ := resp.Body.(upstream.BoundedBody)
	h := x.w.Header()
	// The engine's fields as pairs (upstream.Leg.Fields, asked for only
	// with parsedInto): they go to the client's writer as they are, or,
	// holding a field the datapath reads back from h, into h.
	var ct string
	kv, pairs := upstream.Fields(resp)
	if pairs {
		if ct, pairs = pairsFit(kv); !pairs {
			pairsIntoMap(h, kv)
			ct = canonicalGet(h, headerContentType)
		}
	} else {
		// The Sender's header keys are canonical: no Header.Get.
		ct = canonicalGet(resp.Header, headerContentType)
	}
	sse := strings.HasPrefix(ct, contentTypeSSE)
	*bound = streambound.Bound{Idle: quiet.bodyStall} // End zero: no cap
	if sse {
		bound.Idle = quiet.streamIdle
		capD := c.rule.MaxStreamDuration
		if capD <= 0 {
			capD = rt.opts.MaxStreamDuration
		}
		bound.End = x.start.Add(capD)
	}
	// The clock passes no deadline on: the writer it wraps is the one
	// to bind, one step of BindClient's walk fewer.
	clocked := x.w == http.ResponseWriter(&x.obs.clock)
	bound.BindClient(x.direct())
	// The bound's clock is sockio.Mono (integers: no Time.Add per move).
	extendAt := func(now sockio.Mono) {
		readBound := ub != nil && !ub.Buffered() // else no read can block: the rest of the body is in memory
		if !readBound && !bound.BindsClient() {
			return
		}
		// readBound only turns false (the rest of the body came into
		// memory), so a deadline Next leaves in place is already on the
		// engine's reads.
		if d, moved := bound.NextAt(now); moved && readBound {
			ub.SetReadDeadline(d.Time())
		}
	}
	extend := func() { extendAt(sockio.Now()) }
	// One clock reading for the first bound and the time to first byte
	// (the head below is only buffered, not yet written).
	headAt, headIn := x.obs.clock.NowSince()
	extendAt(x.startAt().Add(headIn)) // headAt: the clock's Start is x.start

	// No strip only when the engine's head, parsed straight into h (or
	// into pairs), held no hop field: h held the request id alone before
	// it (serveSingleExcl passes h as Leg.Into only then), so nothing else
	// in h needs one.
	strip := !parsedInto || !upstream.HopFree(resp)
	if !parsedInto { // else the engine's headers are already in h
		for k, vv := range resp.Header {
			h[k] = vv
		}
	}
	if strip {
		hop.Strip(h)
	}
	// The client's id, even if the engine minted its own (a parsed-into h
	// kept the client's and dropped the engine's, unless the engine named
	// it in Connection: only a stripped h can have lost it).
	if !pairs && (!parsedInto || len(h[HeaderRequestID]) == 0) {
		h[HeaderRequestID] = x.ids[1:2:2]
	}
	x.wroteHeader = true
	if pairs {
		// The client's id goes with the pairs (the room for it is
		// there), and h is left empty (serve put no id in it for such a
		// writer): the head's walk of h, and emptying it for the next
		// request, then cost nothing. Asked for only when the clock
		// wraps a writer that takes pairs (serveSingleExcl, takesFields).
		kv = append(kv, HeaderRequestID, x.ids[1])
		x.obs.clock.WriteHeaderFields(resp.StatusCode, sse, kv)
	} else if parsedInto && clocked {
		// h is resp.Header, whose Content-Type sse was read from and
		// which nothing has set since: the clock need not look again.
		x.obs.clock.WriteHeaderOf(resp.StatusCode, sse)
	} else {
		x.w.WriteHeader(resp.StatusCode)
	}
	c.ttfb.Observe(headIn.Seconds())

	flush := sse || resp.ContentLength < 0
	fl, _ := x.w.(http.Flusher)
	if flush && fl != nil {
		fl.Flush()
	}
	var rerr error    // nil: the body ended
	var gone bool     // the client went away
	var end time.Time // the answer's end when copyBody read it; zero: read it now
	handled := false
	if st, ok := resp.Body.(upstream.Streamer); ok && sse {
		// The bound travels in the stream by value (its lines are the
		// stream's) and comes back; a value, it stays on relay's stack.
		s := &sseStream{x: x, w: x.w, placed: x.placed, fl: fl, ub: ub, bound: *bound}
		if s.clk, _ = x.w.(*respclock.Writer); s.clk != nil {
			if f, ok := s.clk.Unwrap().(http.Flusher); ok {
				s.fl = f // respclock's Flush only passes it on
			}
			if s.clk.HasStart() {
				s.start = x.startAt() // the clock's Start is x.start
			}
		}
		s.rb.pool = &rt.bufs
		handled, rerr = st.Stream(s)
		*bound = s.bound
		*relayed, gone = s.relayed, s.gone(rerr)
	}
	if !handled {
		// A small body that came whole with the head is written in one
		// buffered write: the head's reading stands for its first byte and
		// its end too (copyBody), two clock readings fewer per request.
		var at time.Time
		if !sse && bodyInOneWrite(resp, ub) {
			at = headAt
		}
		*relayed, rerr, gone, end = rt.copyBody(x, resp, sse, flush, fl, extend, at)
	}
	if gone {
		c.countRequest(i, statusClientClosed, codeClientClosed)
		return // client gone; closing the body closes the engine connection
	}
	if rerr == nil {
		c.countRequest(i, resp.StatusCode, "")
		if end.IsZero() {
			c.latency.Observe(x.finished().Seconds())
		} else {
			c.latency.Observe(x.finishedAt(end, headIn).Seconds()) // end is headAt (copyBody's at)
		}
		return
	}
	timedOut := errors.Is(rerr, os.ErrDeadlineExceeded)
	switch {
	case x.r.Context().Err() != nil:
		c.countRequest(i, statusClientClosed, codeClientClosed)
		return
	case sse && timedOut && !time.Now().Before(bound.End):
		bound.Notice()
		_, _ = io.WriteString(x.w, sseStreamCappedLine)
		if fl != nil {
			fl.Flush()
		}
		c.countRequest(i, resp.StatusCode, CodeStreamCapped)
		c.latency.Observe(x.finished().Seconds())
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

// bodyInOneWrite reports a body of known length up to oneWriteBody that
// is all in memory (ub.Buffered): reading it waits on nothing and writing
// it, once, fills only the front end's buffer.
func bodyInOneWrite(resp *http.Response, ub upstream.BoundedBody) bool {
	return ub != nil && resp.ContentLength >= 0 && resp.ContentLength <= oneWriteBody && ub.Buffered()
}

// copyBody is the relay's read-write loop for bodies Stream does not take
// (not SSE, TLS engine connections, other Senders): it returns the bytes
// relayed, the read error that ended it (nil at the body's end) and
// whether the client went away.
//
// at, when set, is a clock reading taken at the head of a body that was
// already in memory then and small enough for one buffered write
// (oneWriteBody). If the first read brings the whole body, nothing
// between the head and the end waits on a socket (the head and the body
// are only buffered, as the first stream bound and the time to first
// byte already share a reading for that reason), so at is the first
// byte's time and the end returned; otherwise end is zero and the clock
// is read as before.
func (rt *Runtime) copyBody(x *exchange, resp *http.Response, sse, flush bool, fl http.Flusher, extend func(), at time.Time) (relayed uint64, rerr error, gone bool, end time.Time) {
	rb := relayBuf{pool: &rt.bufs}
	if sse { // idle between events: no buffer held (relaybuf.go)
		rb.wait, _ = resp.Body.(upstream.ReadWaiter)
	}
	// The writer asked for the room of its write buffer (getFrom): none
	// for a flushed answer, whose writer is given back between writes.
	var lender http.ResponseWriter
	if !flush {
		lender = x.direct()
	}
	defer rb.release()
	for {
		buf := rb.getFrom(lender) // nothing writes to the client between the read and the write
		n, err := resp.Body.Read(buf)
		if n > 0 && x.placed != nil {
			if sse {
				x.placed.FirstToken(time.Now())
			} else {
				x.placed.Done(0)
			}
			x.placed = nil
		}
		if n > 0 {
			if err == nil {
				extend()
			}
			one := err == io.EOF && relayed == 0 && !at.IsZero() && x.w == http.ResponseWriter(&x.obs.clock)
			relayed += uint64(n)
			var werr error
			if one {
				_, werr = x.obs.clock.WriteAt(buf[:n], at)
			} else {
				_, werr = x.w.Write(buf[:n])
			}
			if werr != nil {
				return relayed, nil, true, time.Time{}
			}
			if one {
				end = at
			}
			if flush && fl != nil {
				fl.Flush()
			}
			if err == nil {
				rb.idle()
			}
		}
		if err == io.EOF {
			return relayed, nil, false, end
		}
		if err != nil {
			return relayed, err, false, time.Time{}
		}
	}
}

// prepareOutboundHeader strips hop-by-hop headers (and those named in
// Connection) and sets X-Forwarded-For: the client alone, or appended to
// the client's own X-Forwarded-For when the gateway trusts it
// (Options.TrustForwardedFor; a client could otherwise pass for any
// address in engine logs and per-client limits). It edits the inbound
// header in place: the handler owns it and it is reused by retries.
func prepareOutboundHeader(h http.Header, client string, trustForwarded bool) {
	prepareOutboundHeaderIn(h, true, client, trustForwarded, new([1]string))
}

// prepareOutboundHeaderIn is prepareOutboundHeader with the X-Forwarded-For
// value's backing array supplied by the caller (one that is allocated
// anyway, as the exchange), and strip false when h is known to hold no
// hop-by-hop field (singleSend.hopFree).
func prepareOutboundHeaderIn(h http.Header, strip bool, client string, trustForwarded bool, xff *[1]string) {
	if strip {
		hop.Strip(h)
	}
	if client == "" {
		if !trustForwarded {
			delete(h, headerForwardedFor)
		}
		return
	}
	// An untrusted claim is replaced below, not deleted first, nor looked
	// up: one map operation fewer per request, two without the trust.
	xff[0] = forwardedFor(h, client, trustForwarded)
	h[headerForwardedFor] = xff[:]
}

// forwardedFor is the X-Forwarded-For value the engine gets for a client
// at address client (not ""): the address alone, or appended to the
// client's own list when the gateway trusts it.
func forwardedFor(h http.Header, client string, trustForwarded bool) string {
	if trustForwarded {
		if prior := h[headerForwardedFor]; len(prior) > 0 {
			return strings.Join(prior, ", ") + ", " + client
		}
	}
	return client
}

// sessionKey extracts the sel-3 persistence key; "" when the request has none.
func (c *compiled) sessionKey(r *http.Request, client string) string {
	s := c.rule.Session
	switch s.Source {
	case spec.SessionFromHeader:
		return canonicalGet(r.Header, c.sessionHeader)
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

// clientIP returns the host part of a RemoteAddr ("ip:port" or "[v6]:port"),
// with leading '[' and trailing ']' removed as strings.Trim(host, "[]")
// would, without building its cutset on each of the two or three calls a
// request makes.
func clientIP(remote string) string {
	i := strings.LastIndexByte(remote, ':')
	if i < 0 {
		return remote
	}
	host := remote[:i]
	for len(host) > 0 && host[0] == '[' {
		host = host[1:]
	}
	for len(host) > 0 && host[len(host)-1] == ']' {
		host = host[:len(host)-1]
	}
	return host
}

func strconvQuote(s string) string {
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return strconv.Quote(s)
}

// requestBytes is the request body size sent to the engine: the buffered
// body, or what the streamed one delivered.
func requestBytes(body []byte, s *upstream.BodyStream) uint64 {
	if s != nil {
		return uint64(s.Sent())
	}
	return uint64(len(body))
}

// canonicalGet is h's first value for key, which must already be in
// canonical form: Header.Get would canonicalise it again on every call,
// and both front ends and the Sender store canonical keys.
func canonicalGet(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}
