// Package enginesim simulates a loaded vLLM engine closely enough that a
// routing choice changes what a client measures: a paged KV cache with
// prefix caching (vLLM's block hashes, LRU eviction of unreferenced blocks),
// a continuous-batching scheduler (at most MaxNumSeqs running, a FIFO wait
// queue, chunked prefill under a per-step token budget), and the signals a
// gateway reads from a real engine: OpenAI completions and chat with SSE,
// POST /tokenize, vLLM's Prometheus names on /metrics, KV events over ZMQ
// (BlockStored/BlockRemoved, msgpack, topic/sequence framing) and the NIXL
// kv_transfer_params handshake of a prefill/decode pair.
//
// Time is simulated with timers, not burnt: each engine is one goroutine
// that plans a step (Core.Plan, pure bookkeeping in virtual time), sleeps
// for the step's modelled duration and then completes it (Core.Complete),
// which emits tokens and KV events. The model, with defaults from
// llm-d-inference-sim's "8B on H100, balanced" profile:
//
//	step = prefill + decode
//	prefill = Σ PrefillOverhead (per request starting its prefill)
//	        + PrefillPerToken × uncached prompt tokens computed this step
//	decode  = DecodeStep × (1 + (LoadFactor−1) × (running−1)/(MaxNumSeqs−1))
//	          when any running request is decoding
//
// so a prefix-cache hit shortens the requester's prefill and every other
// request's step, exactly the effect a cache-aware router is meant to buy.
// Core is deterministic and independent of wall time; its tests assert on
// the computed schedule.
//
// The package is test tooling: it is linked into test/enginesim/cmd/enginesim
// and the routing benchmark, never into cmd/infergate.
package enginesim
