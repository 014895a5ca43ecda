// Package chatload builds the chat completion bodies the EPP load driver
// sends and the tokenizer benchmark measures, so both see the same
// workload: system prompts shared between requests and a user turn unique
// to each, padded to a fixed body size.
package chatload

import (
	"fmt"
	"strconv"
	"strings"
)

// SystemPrompts returns n distinct system prompts of about 7/8 of size
// bytes each, made of words and numbers so a tokenizer sees real variety.
func SystemPrompts(n, size int) []string {
	words := []string{"cache", "route", "token", "engine", "prefix", "decode", "batch", "queue", "model", "gateway", "stream", "block"}
	out := make([]string, n)
	for i := range out {
		var b strings.Builder
		for j := 0; b.Len() < size*7/8; j++ {
			b.WriteString(words[(i*7+j*j+j/3)%len(words)])
			b.WriteByte(' ')
			if j%11 == 0 {
				b.WriteString(strconv.Itoa(i*1000 + j))
				b.WriteByte(' ')
			}
		}
		out[i] = b.String()
	}
	return out
}

// Body is a streamed chat completion for model with system prompt sys and
// the user turn "question seq", padded so the body is size bytes (or the
// unpadded body when that is longer).
func Body(model, sys string, seq uint64, size int) []byte {
	head := fmt.Sprintf(`{"model":%q,"stream":true,"messages":[{"role":"system","content":%q},{"role":"user","content":"question %d `, model, sys, seq)
	return []byte(head + strings.Repeat("x", max(0, size-len(head)-4)) + `"}]}`)
}
