// Package pd runs the engine-specific prefill/decode (P/D) sequences behind
// one small interface. The datapath picks a Pair of endpoints, looks up the
// rule's Dialect with For/New (keyed by kvEngineType; llama.cpp has none) and
// calls Serve, which sends the upstream legs through a Sender, writes the
// client response and returns an Outcome the datapath feeds to its breaker
// and to Record (metrics). pd never imports datapath; it sits below it.
//
// Dialects (one file each):
//   - vLLM (vllm.go), sequential: a one-token prefill carrying
//     kv_transfer_params{do_remote_decode:true}, then the client's body plus
//     the prefill's params verbatim to decode. Both legs carry the NIXL
//     X-Request-Id "___prefill_addr_<ip:nixl>___decode_addr_<ip:nixl>_<32hex>".
//     Prefill 4xx is relayed; 5xx or a transport failure is retried once on
//     Pair.AltPrefill, then decode recomputes without params.
//   - SGLang (sglang.go), concurrent: both legs get the body plus the
//     bootstrap triple and are dispatched together (a real prefill blocks
//     until its decode joins the room). A prefill connection death before any
//     decode byte retries the pair once with a fresh room.
//   - TensorRT-LLM (trtllm.go), sequential: context_only then
//     generation_only with the context's disaggregated_params; a context that
//     already finished (finish_reason other than length/not_finished) is
//     returned directly. Context 4xx is relayed; 5xx or a transport failure
//     is retried once on Pair.AltPrefill, then generation serves the request
//     standalone (no disaggregated_params: it recomputes the context),
//     counted as a KV-transfer failure like vLLM's.
//
// Body rewriting (rewrite.go) parses the client body once into top-level
// member offsets and splices only the named fields; every other byte (key
// order, number spelling, escapes, whitespace) reaches the engine unchanged.
//
// Outcome is the only side channel: Serve never touches metrics or the
// breaker. The datapath calls Record(m, rule, outcome) for metrics and feeds
// each LegResult (NotSent = connect failure, Died = post-connect death,
// Status >= 500 = origin error) to its breaker. HTTPSender is a plain-HTTP
// Sender whose dial failures are *NotSentError; the datapath may supply its
// own transport instead.
//
// Errors infergate generates are OpenAI-shaped
// {"error":{"message","type","code"}} with header X-Infergate-Error: <code>.
// Every leg has its own deadline (Options); when one leg fails its sibling is
// cancelled at once, and cancelling ctx (client gone) cancels both. Serve
// returns only after every goroutine and upstream connection it started has
// finished.
package pd
