// Package eppconformance is a black-box conformance suite for endpoint
// pickers (EPPs) of the Gateway API Inference Extension. It speaks ext_proc as
// Envoy does — a real gRPC client over the network, request headers then the
// body in FULL_DUPLEX_STREAMED mode, the response path after the pick — and
// checks what the EPP protocol (GIE proposal 004) requires of the picker:
//
//   - protocol order: the request-headers answer first, then the body chunks
//     re-emitted with the same bytes and end_of_stream, then trailers;
//   - the pick: header x-gateway-destination-endpoint and dynamic metadata
//     envoy.lb / x-gateway-destination-endpoint agree, clear_route_cache is
//     set, every address is ip:port and belongs to the pool;
//   - subset hints: the pick stays inside the hinted subset; an empty subset or
//     one with no eligible endpoint is answered with 503;
//   - shedding: 429 with a reason header (when the target can provoke it);
//   - saturation: with the target's capacity of picks in flight, one more is
//     shed with 429 and a reason, and ended streams give their capacity back
//     (when the target bounds its picks in flight);
//   - health: the liveness, readiness and ext_proc gRPC health services answer
//     SERVING;
//   - served-endpoint feedback on the response path is accepted and, when the
//     target can show it, recorded;
//   - bodies from 1 KB to 4 MB in chunks, 1,000 concurrent streams,
//     cancelled and malformed streams that leave the EPP healthy and (when the
//     target exposes a goroutine count) flat;
//   - prefix affinity across the turns of one conversation (when the target
//     claims it).
//
// It makes no timing assertions; every wait is bounded only so a broken EPP
// fails instead of hanging. Point it at any EPP with Run and a Target, or with
// the EPP_CONFORMANCE_* environment variables read by TestExternalEPP.
package eppconformance
