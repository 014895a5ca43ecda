// Package pd holds everything infergate knows about each engine's
// prefill/decode (P/D) protocol, one Dialect per engine (one file each,
// registered in one map by kvEngineType; llama.cpp has none). A Dialect
// runs the engine's sequence (Serve), says which generation APIs the
// engine's transfer covers and who serves the others whole (Split), and
// names the client body fields that are its transfer state
// (TransferFields; the union of every dialect's is stripped on every P/D
// path, StripClientTransferState). The datapath picks a Pair of endpoints,
// looks up the rule's Dialect with For/New and calls Serve, which sends the
// upstream legs through an upstream.Sender, writes the client response and
// returns an Outcome the datapath feeds to its breaker and to Record
// (metrics). pd never imports datapath; it sits below it.
//
// Each Serve runs as one per-request seq (seq.go): the request, pair,
// sender, options, outcome and log fixed once, so the shared steps
// (prefill with failover, decode with failover, relay) and SGLang's dual
// dispatch and fan-out take only what differs between their calls.
//
// Dialects (one file each):
//   - vLLM (vllm.go), sequential: a one-token prefill carrying
//     kv_transfer_params{do_remote_decode:true}, then the client's body plus
//     the prefill's params verbatim to decode. Both legs carry the NIXL
//     X-Request-Id "___prefill_addr_<ip:nixl>___decode_addr_<ip:nixl>_<32hex>".
//     Prefill 4xx is relayed; 5xx or a transport failure is retried once on
//     Pair.AltPrefill, then decode recomputes without params. Params that
//     are present but malformed (handoff.go) end the request with a 502 and
//     no decode leg. That is the NIXL sequence; a pair whose decode (else
//     prefill) declares another kv_connector (connector.go) runs that
//     connector's: Mooncake (vllm_mooncake.go: the gateway mints the
//     transfer id and bootstrap address, plain request ids) or MoRI-IO
//     (vllm_moriio.go: a checked handoff or the request fails; its decode
//     never recomputes).
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
// each LegResult (NotSent = connect failure, an *upstream.DialError; Died =
// post-connect death; Status >= 500 = origin error) to its breaker.
//
// Errors infergate generates are OpenAI-shaped
// {"error":{"message","type","code"}} with header X-Infergate-Error: <code>,
// rendered by clienterr like every other gateway error.
// Every leg has its own deadline (Options); when one leg fails its sibling is
// cancelled at once, and cancelling ctx (client gone) cancels both. Serve
// returns only after every goroutine and upstream connection it started has
// finished.
package pd
