// Package kvexact is the pure core of the KV-exact routing tier (Tier 1.5):
// it decodes engine KV-cache events, reproduces engine block hashes, and
// keeps a per-rule inventory of which endpoint holds which prompt blocks. It
// imports no ZMQ and no HTTP; the subscriber in kvexact/zmqsub feeds it
// through a narrow method set (Apply, NextSeq, SetConnected, MarkRebuilt).
//
// # Decoding
//
// DecodeMessage/DecodeBatch take the three-frame vLLM/SGLang message
// (topic, 8-byte big-endian seq, msgpack batch). The batch may be an array
// [ts, events, dp_rank?] or a map; each event a positional array (vLLM ≤
// 0.25, SGLang) or a map with a "type" key (vLLM ≥ 0.26). Hashes may be any
// msgpack int width, signed (SGLang) or unsigned, or bin/str (last 8 bytes
// big-endian). Unknown event tags are skipped and counted (Batch.Unknown);
// anything else malformed fails the batch with ErrMalformed, never a panic
// (FuzzDecodeBatch). The decoder is hand-written over the byte slice with
// zero allocations per batch when the Batch is reused.
//
// # Dual keys
//
// Engine hashes depend on engine settings the gateway cannot always know
// (vLLM's default pickle hash, a random PYTHONHASHSEED, TRT-LLM's
// v1_block_key), so the index is keyed by infergate's own chained key,
// computed from the token_ids every BlockStored carries: key_i =
// xxhash64(key_{i-1} ‖ tokens as uint32 LE), root RootKey (KeysForTokens;
// the request side computes the same from its token ids). Engine hashes
// are kept only in a per-(endpoint, rank) engine-hash → own-key map, used to
// anchor a store's parent and to apply BlockRemoved. A store whose parent
// is unknown (published before we connected) cannot be keyed and is skipped
// until the prefix is stored again. Blocks with extra keys (LoRA,
// multimodal, cache salt), non full-attention groups and tiers other than
// GPU/CPU are not indexed (counted by reason). The engines' own algorithms
// (vLLM sha256_cbor/xxhash_cbor with NONE_HASH from PYTHONHASHSEED, SGLang's
// SHA-256 chain, LoxiLB's blockhash_trtllm) are reproduced in hash.go and
// proven against the shared fixtures, for an engine-hash fast path and for
// parity probes.
//
// # Inventory
//
// One Inventory per rule: own key → bitmaps of the (endpoint, DP rank)
// slots holding the block on GPU and on CPU (≤ 64 slots per rule), in
// sharded open-addressing tables under RWMutexes: many request-path readers,
// one writer per subscriber. Score walks a request's keys from block 0 and
// returns per candidate the consecutive prefix it holds on any rank (split
// into GPU and CPU-only counts), stopping when no candidate still matches.
// Memory is bounded by a per-rule block budget with CLOCK eviction (an LRU
// approximation by last store; reads never write): ~36 bytes per indexed
// block for the index, ~62 including the engine-hash bridge of the holding
// (endpoint, rank) (BenchmarkBytesPerBlock, 1M blocks).
// The block size is learned from the first BlockStored (configured size is
// the fallback); events of another size are counted and skipped.
//
// # Trust
//
// Sequence numbers are tracked per (endpoint, rank): a forward gap or a
// regression (the only restart signal on the wire) clears that rank and
// marks it untrusted with a reason; AllBlocksCleared clears but keeps trust.
// A reconnect of the subscriber clears the rank too (PUB drops what a
// missing subscriber would have got, and a killed-and-restarted engine has
// an empty cache), keeping its sequence so the next event still tells a
// restart from a gap.
// An endpoint is Trusted only when every rank is connected and has either
// been connected for the warm-up since its last (re)connect or reset, or
// been rebuilt by a replay from sequence 0, and it is not stale: a feed can
// stop while its socket stays connected (a stuck publisher, a frozen host),
// so once work was sent to an endpoint (NoteWork) and none of its ranks
// published an event for StaleAfter it is untrusted until its next event.
// An idle endpoint is not stale. Callers fail open: an untrusted
// or empty inventory is a miss, never a routing decision.
//
// TensorRT-LLM has no PUB socket: its events are drained with POST
// /kv_cache_events on the serving port by kvexact/trtpoll, which feeds the
// same inventory through the same methods (one synthetic batch per engine
// event, seq = event_id). The drain is destructive: infergate must be the
// only consumer of each TensorRT-LLM endpoint — a second router, Dynamo or
// an operator's curl steals events and leaves the inventory with gaps — and
// drains each engine once, feeding every rule's inventory that indexes it.
//
// The request side (token ids from the engine's /tokenize, Tier 1.5) lives
// in kvexact/tokenize and datapath/ladder; the per-rule lifecycle of
// inventories and subscribers in datapath/kvplane.
package kvexact
