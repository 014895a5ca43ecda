package epp

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// Picker chooses the endpoints for one request. It is the only thing the
// protocol server asks of the routing side; everything Envoy-shaped stays in
// this package.
//
// Pick is called once per stream, after the whole request body has arrived
// (or after the headers, for a request without a body), on the stream's
// goroutine and with the stream's context: a cancelled stream cancels the
// pick. Pick may be called concurrently for different streams.
//
// Pick returns the ordered endpoint list, or an error. A *Refusal error is
// answered to the client as an HTTP status (Shed → 429, Unavailable → 503),
// and so is any Shedder (429 with its reason);
// a context error ends the stream with the matching gRPC status; any other
// error ends the stream with gRPC Internal, so the gateway's fail-open or
// fail-close policy decides what the client sees.
//
// Served is called exactly once for every Pick that returned a Result, when
// that request's stream ends, however it ends. It carries what the proxy
// reported about the response, so in-flight counts, breakers and latency
// learning can be settled. It is not called for refused or failed picks.
// Served must not block: it runs on the stream's goroutine as the stream
// closes.
type Picker interface {
	Pick(ctx context.Context, req *Request) (Result, error)
	Served(Outcome)
}

// Request is what the proxy told us about one HTTP request.
type Request struct {
	// Headers are the request headers as the proxy sent them. Envoy lower-cases
	// names and includes the pseudo-headers (":path", ":method", ":authority").
	Headers Headers
	// Body is the complete request body; nil when the request has none. It is
	// re-emitted to the proxy after the pick: read it, never modify it.
	Body []byte
	// Subset, when non-nil, is the proxy's endpoint subset hint: the pick must
	// come from this list. It is never empty (an empty hint is refused with 503
	// before the picker is asked). nil means no restriction.
	Subset []string
	// Hints are the GIE/llm-d request hints, already parsed.
	Hints Hints
}

// Hints are the request headers through which a gateway or client steers the
// pick. They are advisory: a picker that does not implement priority or SLOs
// may ignore them.
type Hints struct {
	Objective  string        // x-gateway-inference-objective: the objective (priority class) name
	FairnessID string        // x-gateway-inference-fairness-id: the flow to share capacity fairly across
	ModelName  string        // x-gateway-model-name-rewrite: the model name the request should be served as
	TTFT       time.Duration // x-slo-ttft-ms: time-to-first-token target; 0 when absent
	TPOT       time.Duration // x-slo-tpot-ms: time-per-output-token target; 0 when absent
}

// Headers maps lower-case header names to their values in arrival order.
type Headers map[string][]string

// Get returns the first value of the named header ("" when absent). The name
// must be lower-case, as Envoy sends them.
func (h Headers) Get(name string) string {
	if v := h[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Result is a successful pick.
type Result struct {
	// Endpoints are "ip:port" addresses, primary first, then fallbacks the proxy
	// may retry in order. The server drops any address outside the subset hint
	// and refuses with 503 when none remains.
	Endpoints []string
	// Headers are extra request headers to set on the upstream request (for
	// example the prefill endpoint a P/D sidecar reads). They overwrite any
	// value the client sent.
	Headers map[string]string
	// State is opaque to the server and handed back in Outcome, so a picker can
	// settle what it reserved at pick time without a lookup table.
	State any
}

// Outcome is the proxy's report on a picked request, delivered by Served.
type Outcome struct {
	// Result is what Pick returned, after subset filtering.
	Result Result
	// Endpoint is the endpoint the proxy reports as having served the request
	// (x-gateway-destination-endpoint-served); "" when the proxy did not say.
	Endpoint string
	// Status is the upstream response's HTTP status; 0 when no response headers
	// reached the EPP (the proxy skips them, or the request failed first).
	Status int
	// ResponseHeaders is the time from the pick to the response headers; 0 when
	// none arrived.
	ResponseHeaders time.Duration
	// FirstBodyChunk is the time from the pick to the first response body chunk
	// (for a streamed completion, about the time to first token); 0 when the
	// proxy does not stream response bodies to the EPP.
	FirstBodyChunk time.Duration
	// EventStream reports that the response's Content-Type is
	// text/event-stream (a streamed completion); false when it is not or
	// the proxy skipped the response headers.
	EventStream bool
	// Incremental reports that the first body chunk came before the body's
	// end, in a mode that passes chunks on as they arrive (STREAMED or
	// FULL_DUPLEX_STREAMED): its time is when the engine began to answer,
	// not when it finished. A buffered body, or an empty chunk (such as the
	// closing one of a proxy that does not mirror bodies), is not.
	Incremental bool
	// Complete reports that the response reached its end on the stream.
	Complete bool
	// Err says why the stream ended before the response completed (client
	// cancel, malformed stream); nil for a clean end.
	Err error
}

// Progress is implemented by a Picker that wants to hear, while the
// response still streams, that its first body chunk reached the EPP — the
// moment a proxy would see a streamed completion's first token, which
// Served (at the stream's end) reports too late to act on.
type Progress interface {
	// FirstChunk is called at most once per picked stream, on the
	// stream's goroutine, when the first response body chunk arrives and
	// before it is passed back to the proxy (keep it short), always before
	// Served. o is the outcome so far: Result, Endpoint, Status,
	// ResponseHeaders, FirstBodyChunk, EventStream and Incremental are set.
	FirstChunk(o Outcome)
}

// Refusal is a pick answered to the client with an HTTP status instead of an
// endpoint. Create one with Shed or Unavailable (or directly for other
// statuses); the server sends it as an ImmediateResponse with the reason in
// the body and in the shed-reason header.
type Refusal struct {
	Status int    // HTTP status sent to the client
	Reason string // short machine-readable reason, e.g. "queue_full"
	// RetryAfter, when positive, is sent as Retry-After (whole seconds,
	// rounded up): when a shed request has a fair chance on retry.
	RetryAfter time.Duration
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("refused with %d: %s", r.Status, r.Reason)
}

// Shedder is an error that means the request is shed: flow control
// refused it (a full queue, a sheddable priority under saturation). Pick
// may return any error implementing it, wrapped or not — a flow-control
// package need not import epp — and the server answers 429 with
// ShedReason() in the reason header, like Shed.
type Shedder interface {
	error
	ShedReason() string
}

// Shed refuses a request because the pool is saturated or the request's
// priority is sheddable (429 Too Many Requests).
func Shed(reason string) error {
	return &Refusal{Status: http.StatusTooManyRequests, Reason: reason}
}

// Unavailable refuses a request because no endpoint is ready or eligible
// (503 Service Unavailable).
func Unavailable(reason string) error {
	return &Refusal{Status: http.StatusServiceUnavailable, Reason: reason}
}
