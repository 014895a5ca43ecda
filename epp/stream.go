package epp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// phase is where a stream is in the one HTTP exchange it carries. Messages
// must arrive in this order; anything else is a protocol error.
type phase uint8

const (
	phaseRequestHeaders phase = iota // nothing yet: the request headers come first
	phaseRequestBody                 // buffering request body chunks until the end
	phaseResponse                    // pick sent; response messages may follow
	phaseResponseBody                // relaying response body chunks
	phaseDone                        // the response ended; only the close remains
)

func (p phase) String() string {
	return [...]string{"request headers", "request body", "response", "response body", "end of response"}[p]
}

// presizeLimit bounds the body buffer reserved on a declared content-length.
const presizeLimit = 1 << 20

// presizeAhead bounds that buffer, too, to this many times the bytes that
// have arrived: a stream pins (and takes from Options.BodyBudgetBytes) at
// most four times what it has sent.
const presizeAhead = 4

// errAnswered ends a stream that has been answered with an ImmediateResponse:
// the exchange is over and the RPC ends with OK.
var errAnswered = errors.New("epp: answered with an immediate response")

// stream is the state of one ext_proc stream, i.e. one HTTP request. It lives
// on the stream's goroutine only: no locks, no goroutines of its own, so a
// stream that ends leaves nothing behind.
type stream struct {
	s   *Server
	srv extprocv3.ExternalProcessor_ProcessServer
	ctx context.Context

	phase         phase
	noRequestBody bool // the proxy sends no request body (request_body_mode NONE)
	respStreamed  bool // response body chunks must be re-emitted (FULL_DUPLEX_STREAMED)
	respBuffered  bool // the proxy buffers response bodies (BUFFERED, BUFFERED_PARTIAL)

	req      Request
	declared int64  // the request's content-length, 0 when absent or invalid
	body     []byte // the request body so far, contiguous (what the picker sees)
	chunks   []int  // the length of each body chunk as it arrived, to re-emit them as they came
	held     int64  // bytes of Server.bodies this stream has taken for its body (its capacity)
	heldHead int64  // bytes of Server.bodies taken for its request headers and subset hint, until it ends
	trailers bool   // the request body ended with trailers rather than end_of_stream

	picked   bool // Pick returned a Result: Served is owed
	sent     bool // the pick reached the proxy
	pickedAt time.Time
	outcome  Outcome
	result   string // infergate_epp_streams_total{result}

	heads heads      // the encoded answers' bytes
	wire  wireAnswer // the answer being sent (gRPC's codec reads it before SendMsg returns)
	slots sendSlots  // where the codec lists the answers' bytes for gRPC
}

// Process serves one ext_proc stream: one HTTP request and its response.
func (s *Server) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	st := &stream{s: s, srv: srv, ctx: srv.Context(), respStreamed: true}
	s.metrics.Active.Inc()
	var err error
	if s.streams.take(1) {
		err = st.run()
		st.releaseBody()
		st.s.bodies.give(st.heldHead)
		st.finish(err)
		s.streams.give(1)
	} else {
		err = st.refuseOverCap()
		st.finish(err)
	}
	s.metrics.Active.Dec()
	return err
}

// refuseOverCap answers a stream beyond Options.MaxStreams at once, with
// nothing read: Envoy sends the request headers as it opens the stream,
// so the answer is the one to them. Reading first would let streams that
// never send anything hold goroutines past the cap.
func (st *stream) refuseOverCap() error {
	st.s.metrics.Bounded.WithLabelValues(BoundStreams).Inc()
	if err := st.answer(tooManyStreamsRefusal()); !errors.Is(err, errAnswered) {
		return err
	}
	return nil
}

// refuseBodyMemory answers 429 for a stream whose body, headers or hint
// would take the body budget past its bound, and counts it.
func (st *stream) refuseBodyMemory() error {
	st.s.metrics.Bounded.WithLabelValues(BoundBodyMemory).Inc()
	return st.answer(bodyMemoryRefusal())
}

func (st *stream) run() error {
	for {
		msg, err := st.srv.Recv()
		if errors.Is(err, io.EOF) {
			return st.closed()
		}
		if err != nil {
			return st.lost(err)
		}
		if err := st.handle(msg); err != nil {
			if errors.Is(err, errAnswered) {
				return nil
			}
			return err
		}
	}
}

// closed handles the proxy's half-close. After the pick it is the normal end
// of a stream; before it, the request never completed.
func (st *stream) closed() error {
	if st.phase >= phaseResponse {
		return nil
	}
	st.result = ResultCanceled
	if st.phase == phaseRequestHeaders {
		return nil // opened and closed with nothing asked: nothing to answer
	}
	return status.Errorf(codes.Aborted, "stream closed during the %s, before the request was complete", st.phase)
}

// lost handles a receive error: the proxy cancelled (client gone) or the
// transport failed.
func (st *stream) lost(err error) error {
	st.outcome.Err = err
	ctxErr := st.ctx.Err()
	undecodable := isUndecodable(err)
	if !st.sent { // after the pick, the stream still counts as picked
		st.result = ResultCanceled
		if undecodable || ctxErr == nil && status.Code(err) != codes.Canceled {
			st.result = ResultMalformed
		}
	}
	if ctxErr != nil && !undecodable {
		return status.FromContextError(ctxErr).Err()
	}
	return err
}

// isUndecodable reports whether a receive error is gRPC refusing the
// proxy's next message — bytes that do not decode (Internal), or one past
// the largest message (ResourceExhausted) — rather than the stream going
// away. gRPC ends such a stream itself, so its context is already done
// when the error arrives; it is still the peer's malformed stream.
func isUndecodable(err error) bool {
	c := status.Code(err)
	return c == codes.Internal || c == codes.ResourceExhausted
}

func (st *stream) handle(msg *extprocv3.ProcessingRequest) error {
	if msg.GetObservabilityMode() {
		return st.malformed(codes.FailedPrecondition, "observability_mode is not supported: the EPP must answer with the pick")
	}
	if pc := msg.GetProtocolConfig(); pc != nil {
		if err := st.configure(pc); err != nil {
			return err
		}
	}
	switch r := msg.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return st.requestHeaders(msg, r.RequestHeaders)
	case *extprocv3.ProcessingRequest_RequestBody:
		return st.requestBody(r.RequestBody)
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return st.requestTrailers()
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return st.responseHeaders(msg, r.ResponseHeaders)
	case *extprocv3.ProcessingRequest_ResponseBody:
		return st.responseBody(msg, r.ResponseBody)
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return st.responseTrailers(msg)
	case nil:
		if msg.GetFlowControlInit() != nil || msg.GetClientWindowUpdate() != nil {
			return nil // flow-control only; we never announce flow control, so nothing to do
		}
		return st.malformed(codes.InvalidArgument, "empty ProcessingRequest")
	default:
		return st.malformed(codes.InvalidArgument, fmt.Sprintf("unknown ProcessingRequest %T", r))
	}
}

// configure reads the proxy's processing modes. The pick needs the whole
// body before the headers are answered, which only FULL_DUPLEX_STREAMED (or
// no body at all) allows; the response side may use any mode.
func (st *stream) configure(pc *extprocv3.ProtocolConfiguration) error {
	switch m := pc.GetRequestBodyMode(); m {
	case extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED:
	case extprocfilterv3.ProcessingMode_NONE:
		st.noRequestBody = true
	default:
		return st.malformed(codes.FailedPrecondition, fmt.Sprintf("request_body_mode %s is not supported: configure FULL_DUPLEX_STREAMED", m))
	}
	rm := pc.GetResponseBodyMode()
	st.respStreamed = rm == extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED
	st.respBuffered = rm == extprocfilterv3.ProcessingMode_BUFFERED || rm == extprocfilterv3.ProcessingMode_BUFFERED_PARTIAL
	return nil
}

func (st *stream) requestHeaders(msg *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) error {
	if st.phase != phaseRequestHeaders {
		return st.outOfOrder("request headers")
	}
	var headBytes int64
	st.req.Headers, headBytes = decodeHeaders(h.GetHeaders())
	hints, err := decodeHints(st.req.Headers)
	if err != nil {
		r := &Refusal{Status: 400, Reason: "invalid_hint"}
		errors.As(err, &r)
		return st.answer(r)
	}
	st.req.Hints = hints
	subset, hinted, err := decodeSubset(msg.GetMetadataContext(), st.s.opts.SubsetNamespace)
	if err != nil {
		return st.malformed(codes.InvalidArgument, err.Error())
	}
	// The headers and the hint stay with the stream to its end (the
	// picker and Served read them), so they count against the body budget
	// as the body does: otherwise streams that send large headers and no
	// body would pin memory no bound covers.
	head := headBytes + heldSubsetBytes(subset)
	if !st.s.bodies.take(head) {
		st.req = Request{}
		return st.refuseBodyMemory()
	}
	st.heldHead = head
	if hinted {
		if len(subset) == 0 {
			return st.answer(&Refusal{Status: 503, Reason: "empty_endpoint_subset"})
		}
		st.req.Subset = subset
	}
	if h.GetEndOfStream() || st.noRequestBody {
		return st.pick()
	}
	if n, err := strconv.ParseInt(st.req.Headers.Get(headerContentLength), 10, 64); err == nil && n > 0 {
		st.declared = n
	}
	st.phase = phaseRequestBody
	return nil
}

func (st *stream) requestBody(b *extprocv3.HttpBody) error {
	if st.phase != phaseRequestBody {
		return st.outOfOrder("request body")
	}
	if int64(len(st.body))+int64(len(b.GetBody())) > st.s.opts.MaxBodyBytes {
		st.body, st.chunks = nil, nil
		return st.answer(&Refusal{Status: 413, Reason: "request_body_too_large"})
	}
	if !st.appendBody(b.GetBody()) {
		st.body, st.chunks = nil, nil
		return st.refuseBodyMemory()
	}
	if b.GetEndOfStream() {
		return st.pick()
	}
	return nil
}

// appendBody adds a chunk, or reports false when the process's body budget
// (Options.BodyBudgetBytes) cannot take it. A body that arrives in one
// chunk (most requests) is used where gRPC decoded it, never copied. From
// the second chunk on, the body moves to one buffer sized from the
// declared length — at most presizeLimit and presizeAhead times the
// bytes arrived, so a client cannot make us reserve memory it never
// sends, and streams that declare large bodies and send a few bytes
// cannot take the whole budget — and grows with the bytes that actually
// arrive: a large body costs its size once, not once per chunk plus a
// join. Every byte of the body's capacity is taken from the budget before
// it is allocated.
func (st *stream) appendBody(p []byte) bool {
	if len(st.chunks) == 0 {
		// The codec copies bytes fields out of its receive buffer: p is
		// ours to keep, and already on the heap.
		if !st.s.bodies.take(int64(cap(p))) {
			return false
		}
		st.held, st.body = int64(cap(p)), p
		st.chunks = append(st.chunks, len(p))
		return true
	}
	if len(st.body)+len(p) > cap(st.body) {
		want := 0
		if len(st.chunks) == 1 {
			want = int(min(st.declared, presizeLimit, presizeAhead*int64(len(st.body)+len(p))))
		}
		buf := growBody(&st.s.bodies, st.body, len(p), want, int(st.s.opts.MaxBodyBytes))
		if buf == nil {
			return false
		}
		st.held += int64(cap(buf) - cap(st.body))
		st.body = buf
	}
	st.body = append(st.body, p...)
	st.chunks = append(st.chunks, len(p))
	return true
}

// releaseBody gives the body's bytes back to the process's budget. That
// is not when the stream lets go of the body (after re-emitting it) but
// once the proxy's first response-path message has been answered, or the
// stream ends: gRPC holds re-emitted bytes until they are written, and it
// takes a stream's next answer only when no more than its per-stream
// write quota (64 KiB) of earlier ones is still unwritten — a proxy that
// does not read what it is sent keeps the body counted.
func (st *stream) releaseBody() {
	if st.held != 0 {
		st.s.bodies.give(st.held)
		st.held = 0
	}
}

func (st *stream) requestTrailers() error {
	if st.phase != phaseRequestBody {
		return st.outOfOrder("request trailers")
	}
	st.trailers = true
	return st.pick()
}

// pick asks the picker, then answers the held request headers with the pick
// and re-emits every body chunk, in order, unchanged.
func (st *stream) pick() error {
	start := time.Now()
	if len(st.body) > 0 {
		st.req.Body = st.body
	}
	res, err := st.s.picker.Pick(st.ctx, &st.req)
	if err != nil {
		var r *Refusal
		if errors.As(err, &r) {
			return st.answer(r)
		}
		var shed Shedder
		if errors.As(err, &shed) {
			return st.answer(&Refusal{Status: http.StatusTooManyRequests, Reason: shedReason(shed)})
		}
		if ctxErr := st.ctx.Err(); ctxErr != nil {
			st.result = ResultCanceled
			return status.FromContextError(ctxErr).Err()
		}
		st.result = ResultError
		return status.Errorf(codes.Internal, "pick: %v", err)
	}
	st.picked = true
	res.Endpoints = filterSubset(res.Endpoints, st.req.Subset)
	if n := st.s.opts.MaxEndpoints; n > 0 && len(res.Endpoints) > n {
		res.Endpoints = res.Endpoints[:n:n]
	}
	st.outcome.Result = res
	if len(res.Endpoints) == 0 {
		st.outcome.Err = errors.New("no picked endpoint is eligible")
		return st.answer(&Refusal{Status: 503, Reason: "no_eligible_endpoint"})
	}

	bodyLen := -1
	if !st.trailers && len(st.body) > 0 {
		bodyLen = len(st.body)
	}
	answer, err := encodePick(&st.heads, st.s.opts.DestinationNamespace, res, bodyLen)
	if err != nil {
		// What gRPC's proto codec answers a message it cannot marshal:
		// Internal, so the gateway's failure mode decides, never bytes the
		// proxy cannot parse.
		st.result = ResultError
		st.outcome.Err = err
		return status.Errorf(codes.Internal, "pick answer: %v", err)
	}
	if err := st.sendWire(answer); err != nil {
		return err
	}
	st.sent = true
	st.pickedAt = time.Now()
	st.s.metrics.Pick.Observe(st.pickedAt.Sub(start).Seconds())
	st.result = ResultPicked
	off := 0
	for i, n := range st.chunks {
		eos := i == len(st.chunks)-1 && !st.trailers
		if err := st.sendWire(encodeChunk(&st.heads, fieldRespRequestBody, st.body[off:off+n:off+n], eos)); err != nil {
			return err
		}
		off += n
	}
	st.body, st.chunks, st.req.Body = nil, nil, nil
	if st.trailers {
		if err := st.sendWire(encodeEmpty(&st.heads, fieldRespRequestTrailers, false)); err != nil {
			return err
		}
	}
	st.phase = phaseResponse
	return nil
}

func (st *stream) responseHeaders(msg *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) error {
	if st.phase != phaseResponse {
		return st.outOfOrder("response headers")
	}
	hs, _ := decodeHeaders(h.GetHeaders())
	st.noteServed(msg, hs)
	st.outcome.Status, _ = strconv.Atoi(hs.Get(headerStatus))
	st.outcome.EventStream = isEventStream(hs.Get(headerContentType))
	st.outcome.ResponseHeaders = time.Since(st.pickedAt)
	if err := st.sendWire(encodeEmpty(&st.heads, fieldRespResponseHeaders, false)); err != nil {
		return err
	}
	st.releaseBody()
	if h.GetEndOfStream() {
		st.done()
	} else {
		st.phase = phaseResponseBody
	}
	return nil
}

func (st *stream) responseBody(msg *extprocv3.ProcessingRequest, b *extprocv3.HttpBody) error {
	if st.phase != phaseResponse && st.phase != phaseResponseBody {
		return st.outOfOrder("response body")
	}
	st.noteServed(msg, nil)
	if st.outcome.FirstBodyChunk == 0 {
		st.outcome.FirstBodyChunk = time.Since(st.pickedAt)
		st.outcome.Incremental = len(b.GetBody()) > 0 && !b.GetEndOfStream() && !st.respBuffered
		if st.s.progress != nil {
			st.s.progress.FirstChunk(st.outcome)
		}
	}
	var answer wireAnswer
	if st.respStreamed {
		answer = encodeChunk(&st.heads, fieldRespResponseBody, b.GetBody(), b.GetEndOfStream())
	} else {
		answer = encodeEmpty(&st.heads, fieldRespResponseBody, true) // buffered modes: acknowledged, not re-emitted
	}
	if err := st.sendWire(answer); err != nil {
		return err
	}
	st.releaseBody()
	if b.GetEndOfStream() {
		st.done()
	} else {
		st.phase = phaseResponseBody
	}
	return nil
}

func (st *stream) responseTrailers(msg *extprocv3.ProcessingRequest) error {
	if st.phase != phaseResponse && st.phase != phaseResponseBody {
		return st.outOfOrder("response trailers")
	}
	st.noteServed(msg, nil)
	if err := st.sendWire(encodeEmpty(&st.heads, fieldRespResponseTrailers, false)); err != nil {
		return err
	}
	st.releaseBody()
	st.done()
	return nil
}

// noteServed records the served endpoint from the first response-path
// message that carries it (response headers may be skipped by the proxy).
func (st *stream) noteServed(msg *extprocv3.ProcessingRequest, h Headers) {
	if st.outcome.Endpoint == "" {
		st.outcome.Endpoint = keepServed(decodeServed(msg.GetMetadataContext(), st.s.opts.DestinationNamespace, h), st.outcome.Result.Endpoints)
	}
}

// maxServedLen is the longest served report kept as sent: a host name
// (253 bytes) and a port.
const maxServedLen = 253 + len(":65535")

// servedTooLong stands for a served report longer than any endpoint's
// address: it names none, so it is counted as another endpoint.
const servedTooLong = "(served report too long)"

// keepServed is the served report s as the stream keeps it until it ends:
// the pick's own string when s names a picked endpoint, else a copy, so
// the report never pins the message it was read from (a response-header
// message may be megabytes, and thousands of streams may wait on their
// responses); a report longer than maxServedLen is kept as servedTooLong.
func keepServed(s string, picked []string) string {
	for _, e := range picked {
		if e == s {
			return e
		}
	}
	if len(s) > maxServedLen {
		return servedTooLong
	}
	return strings.Clone(s)
}

func (st *stream) done() {
	st.phase = phaseDone
	st.outcome.Complete = true
}

func (st *stream) send(resp *extprocv3.ProcessingResponse) error {
	return st.settleSend(st.srv.Send(resp))
}

// sendWire sends an answer encoded by hand; only the server's codec
// (ServerCodec) knows how to write it.
func (st *stream) sendWire(a wireAnswer) error {
	st.wire = a
	st.wire.slots = &st.slots
	err := st.srv.SendMsg(&st.wire)
	st.wire = wireAnswer{}
	return st.settleSend(err)
}

// settleSend settles a send's error: the stream is over when the proxy is gone.
func (st *stream) settleSend(err error) error {
	if err != nil {
		if !st.sent {
			st.result = ResultCanceled
		}
		st.outcome.Err = err
		if ctxErr := st.ctx.Err(); ctxErr != nil {
			return status.FromContextError(ctxErr).Err()
		}
		return err
	}
	return nil
}

// answer ends the exchange with an HTTP status of our own.
func (st *stream) answer(r *Refusal) error {
	switch r.Status {
	case 429:
		st.result = ResultShed
	case 503:
		st.result = ResultUnavailable
	default:
		st.result = ResultRefused
	}
	if err := st.send(refusalResponse(st.s.opts.RefusalReasonHeader, r)); err != nil {
		return err
	}
	return errAnswered
}

// shedReason is a Shedder's reason, never empty (the reason header must
// say something).
func shedReason(s Shedder) string {
	if r := s.ShedReason(); r != "" {
		return r
	}
	return "shed"
}

func (st *stream) outOfOrder(got string) error {
	return st.malformed(codes.InvalidArgument, fmt.Sprintf("%s received during the %s", got, st.phase))
}

func (st *stream) malformed(code codes.Code, msg string) error {
	st.result = ResultMalformed
	st.outcome.Err = errors.New(msg)
	return status.Error(code, msg)
}

// finish settles metrics and, when a pick was made, reports the outcome.
func (st *stream) finish(err error) {
	if st.result == "" {
		st.result = ResultCanceled
	}
	st.s.metrics.Streams.WithLabelValues(st.result).Inc()
	if !st.picked {
		return
	}
	if st.outcome.Err == nil && !st.outcome.Complete && err != nil {
		st.outcome.Err = err
	}
	if st.sent {
		st.s.metrics.Served.WithLabelValues(servedMatch(st.outcome)).Inc()
	}
	st.s.picker.Served(st.outcome)
}

// servedMatch classifies the proxy's served report against the pick.
func servedMatch(o Outcome) string {
	if o.Endpoint == "" {
		return ServedUnreported
	}
	for i, e := range o.Result.Endpoints {
		if e == o.Endpoint {
			if i == 0 {
				return ServedPrimary
			}
			return ServedFallback
		}
	}
	return ServedOther
}
