// Package tokenize turns a client request into the token ids the engine
// will see, for the KV-exact tier (Tier 1.5). Parity with the engine is the
// whole point — block keys are computed from these ids and must equal the
// ones the engine publishes — so the default implementation asks the engine
// itself: vLLM-compatible POST /tokenize on a healthy endpoint of the rule,
// {"model","prompt"} for completions and {"model","messages"} for chat (the
// engine applies its own chat template). A prompt already given as token ids
// is used as is.
//
// Engine round trips are bounded by a tight timeout (the tier must never
// slow a request much), cached in an LRU keyed by a hash of model, path and
// the prompt/messages bytes, and coalesced so concurrent identical prompts
// cost one round trip. Any failure is returned as an error: the caller falls
// through to the next tier and never fails the request because of it.
//
// Local (local.go) is the in-process alternative: the model's own
// Hugging Face tokenizer.json through kvexact/bpe, with the chat templates
// bpe reproduces exactly. Chain puts Local first and the engine second, so
// only what Local cannot reproduce costs a round trip (and TensorRT-LLM,
// which has no /tokenize, gets text prompts tokenised at all).
package tokenize
