package pdfake

import (
	"strconv"
	"strings"
)

// Finish reasons of a generation cut by the client's token limit.
const (
	finishLength       = "length"     // OpenAI completions, chat, Responses
	stopReasonMaxToken = "max_tokens" // Anthropic Messages
	stopReasonEndTurn  = "end_turn"
)

// tokenLimit is the client's cap on generated tokens (max_tokens,
// max_completion_tokens or the Responses API's max_output_tokens); ok is
// false when the engine does not honour limits (Config.HonorMaxTokens) or
// the request sets none.
func (x *exchange) tokenLimit() (n int, ok bool) {
	if !x.e.cfg.HonorMaxTokens {
		return 0, false
	}
	for _, f := range []string{fieldMaxTokens, fieldMaxCompletionTokens, fieldMaxOutputTokens} {
		if v, err := strconv.Atoi(string(x.req[f])); err == nil && v > 0 {
			return v, true
		}
	}
	return 0, false
}

// limitWords cuts text to the client's token limit, one word per token as
// the fakes count them; cut says whether anything was dropped.
func (x *exchange) limitWords(text string) (out string, cut bool) {
	n, ok := x.tokenLimit()
	words := strings.Fields(text)
	if !ok || len(words) <= n {
		return text, false
	}
	return strings.Join(words[:n], " "), true
}

// streamChunks is how many token events a streamed answer has: the
// configured count, capped by the client's token limit.
func (x *exchange) streamChunks() (chunks int, cut bool) {
	chunks = x.e.cfg.StreamChunks
	if n, ok := x.tokenLimit(); ok && n < chunks {
		return n, true
	}
	return chunks, false
}

// tokenAt is streamed token i of text: its i-th word, or "tok<i>" past the
// end, with the trailing space the fakes stream.
func tokenAt(words []string, i int) string {
	if i < len(words) {
		return words[i] + " "
	}
	return "tok" + strconv.Itoa(i) + " "
}
