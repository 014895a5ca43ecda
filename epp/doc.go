// Package epp makes infergate an endpoint picker (EPP) of the Kubernetes
// Gateway API Inference Extension: an Envoy external processor
// (envoy.service.ext_proc.v3.ExternalProcessor/Process) that tells the
// gateway which model server takes each request.
//
// # Contract with the proxy
//
// One gRPC stream carries one HTTP request. The proxy sends the request
// headers, then the body in FULL_DUPLEX_STREAMED mode (request_trailer_mode
// SEND). The EPP holds its answer to the headers until the body is complete,
// because the pick depends on the body (prompt prefix, model); then it sends,
// in order:
//
//   - the request-headers response: header x-gateway-destination-endpoint
//     "ip:port[,ip:port…]" (primary, then fallbacks), the same value in dynamic
//     metadata envoy.lb / x-gateway-destination-endpoint, content-length
//     restored, clear_route_cache set;
//   - one streamed body response per body chunk received, the bytes unchanged,
//     end_of_stream on the last one;
//   - a trailers response, when the body ended in trailers.
//
// A subset hint (filter metadata envoy.lb.subset_hint /
// x-gateway-destination-endpoint-subset) restricts the pick; an empty hint or
// one that leaves no eligible endpoint is answered with ImmediateResponse
// 503. Shedding is answered with 429, no ready endpoint with 503, a body over
// Options.MaxBodyBytes with 413 and a malformed SLO hint with 400; each
// carries the reason in Options.RefusalReasonHeader. Two process-wide
// bounds are answered 429 too: the bodies (and request headers) all
// streams hold (Options.BodyBudgetBytes, reason body_memory_exhausted) and the streams
// open (Options.MaxStreams, too_many_streams). The response path is
// passed through (headers acknowledged, body chunks re-emitted) and its
// served-endpoint report (metadata envoy.lb /
// x-gateway-destination-endpoint-served, or the response header of that name)
// goes back to the picker.
//
// A stream the proxy breaks (messages out of order, a non-list subset hint,
// an unsupported request_body_mode or observability_mode) ends with
// InvalidArgument or FailedPrecondition; one the proxy cancels ends with
// Canceled; one closed before the request was complete ends with Aborted.
// None of these leave anything behind: a stream runs on the goroutine gRPC
// gives it and starts none of its own.
//
// # Contract with the routing side
//
// The package knows nothing about rules or the ladder. It asks a Picker:
//
//	type Picker interface {
//		Pick(ctx context.Context, req *Request) (Result, error)
//		Served(Outcome)
//	}
//
// Request carries the headers, the whole body, the subset hint and the parsed
// hints (objective, fairness id, model-name rewrite, TTFT/TPOT SLOs). Result
// carries the ordered endpoints, optional extra headers (the P/D prefill
// endpoint for a sidecar), and opaque State handed back in Outcome. Shed and
// Unavailable build the typed refusals. Served is called exactly once for
// every Pick that returned a Result, when its stream ends, so in-flight
// counts and breakers can be settled. A Picker that also implements Progress
// hears of the first response body chunk as it arrives (the nearest the EPP
// gets to a streamed completion's first token), before Served. The server
// enforces the subset itself, so a picker that ignores Request.Subset still
// never routes outside it.
//
// # Health and metrics
//
// The gRPC health service listens on its own address with the service names
// "liveness" (SERVING while the process serves), "readiness" and
// "envoy.service.ext_proc.v3.ExternalProcessor" (SERVING after SetReady(true)).
// Metrics are created by NewMetrics on the registry the caller passes.
package epp
