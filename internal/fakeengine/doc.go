// Package fakeengine is a fast OpenAI-compatible fake inference engine for
// tests and benchmarks: /v1/completions and /v1/chat/completions (plain JSON
// or SSE `data:` chunks ending in `data: [DONE]`), /v1/models and /health,
// and the rest of the surface (surface.go): /v1/responses and /v1/messages
// (JSON or their named-event streams), /v1/embeddings, /tokenize,
// /detokenize, /v1/messages/count_tokens, /v1/audio/transcriptions
// (multipart, counted as it streams, never held), /v1/audio/speech (audio
// bytes), /version and OPTIONS.
//
// It runs in-process on a loopback address (like httptest, but on any
// 127.0.0.x) or as the cmd/fakeengine binary. Faults are knobs that can be
// flipped while it runs: fixed latency, a forced status, hanging, dropping the
// connection, a gate that holds a stream after its first event, and an
// unhealthy /health. Every completion request is recorded so a test can
// assert exactly what the engine received.
package fakeengine
