package datapath

import (
	"net/http"
	"strconv"

	"github.com/infergate/infergate/datapath/ladder"
)

// CodeContextLengthExceeded (400): the prompt, as the KV-exact tier
// tokenised it, does not fit the context window (max_model_len) of the
// chosen prefill or decode; no leg was sent. OpenAI and SMG use the same
// code for the same refusal.
const CodeContextLengthExceeded = "context_length_exceeded"

// contextTooLong is the context-length rule: a prompt of tokens tokens does
// not fit a window of window tokens (0: unknown, everything fits) when it
// fills it, since the engine must still generate at least one token in it
// (vLLM's OpenAI server refuses such a prompt with a 400 of its own).
func contextTooLong(tokens, window int) bool {
	return window > 0 && tokens >= window
}

// pairWindow is the smaller known context window of prefill pi and decode
// di (0: neither known): the prompt is computed on one and held on the
// other, so it must fit both. A window is configured, else learned from
// the engine (windowOf).
func (c *compiled) pairWindow(pi, di int) int {
	p, d := c.windowOf(pi), c.windowOf(di)
	switch {
	case p == 0:
		return d
	case d == 0:
		return p
	}
	return min(p, d)
}

// refuseLongPrompt answers 400 context_length_exceeded, before any leg is
// sent, for a request whose tokenised prompt does not fit the chosen pair
// (contextTooLong), giving back what choosing the pair took (its cost
// booking and breaker trials; window slots are the caller's). It reports
// whether it answered. A prompt that was not tokenised (KV-exact off, or an
// earlier rung placed the request) is never checked: its length in tokens
// is not known, and the engine refuses it itself.
func (rt *Runtime) refuseLongPrompt(x *exchange, c *compiled, f *ladder.Facts, pc *pairChoice) bool {
	if f.Tokens == nil {
		return false
	}
	pi, di := pc.tr.Prefill.Index, pc.tr.Decode.Index
	n, w := len(f.Tokens), c.pairWindow(pi, di)
	if !contextTooLong(n, w) {
		return false
	}
	pc.tr.Placed.Done(0)
	c.abandonTrial(pi)
	c.abandonTrial(di)
	rt.fail(x, c, -1, http.StatusBadRequest, CodeContextLengthExceeded,
		"this model's maximum context length is "+strconv.Itoa(w)+" tokens; the prompt has "+strconv.Itoa(n)+" tokens")
	return true
}
