package tokenize

import (
	"context"
	"strings"
	"testing"

	"github.com/infergate/infergate/internal/chatload"
	"github.com/infergate/infergate/test/bench/proccpu"
)

// eppChatBodies are chat requests shaped like test/bench/eppload's: a
// system prompt that is one of prefixes shared ones (about 7/8 of size)
// and a user turn unique to the request, padded to size bytes.
func eppChatBodies(first, n, prefixes, size int) (bodies [][]byte, messages [][]byte) {
	sys := chatload.SystemPrompts(prefixes, size)
	for k := first; k < first+n; k++ {
		b := chatload.Body("Qwen/Qwen3-0.6B", sys[k%prefixes], uint64(k), size)
		bodies = append(bodies, b)
		i := strings.Index(string(b), `[{"role"`)
		messages = append(messages, b[i:len(b)-1])
	}
	return bodies, messages
}

// BenchmarkTokenizeChat: the KV-exact tier's tokenisation of an EPP pick
// (the model and messages already located by the tier's body scan), on
// eppload's workload of 8 KB chats in its steady state: 64 shared system
// prompts already cached, every request's user turn seen once (its words
// are cached, its segment is not).
func BenchmarkTokenizeChat(b *testing.B) {
	l := sharedLocal()
	if err := l.Preload(); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	tokens := func(bodies, msgs [][]byte, i int) {
		if _, err := l.Tokens(ctx, Request{Model: "Qwen/Qwen3-0.6B", Path: "/v1/chat/completions", Body: bodies[i], Messages: msgs[i]}); err != nil {
			b.Fatal(err)
		}
	}
	// Request numbers of one width, so the warm-up meets every padding
	// length the measured requests have.
	wb, wm := eppChatBodies(100_000, 256, 64, 8<<10)
	for i := range wb {
		tokens(wb, wm, i)
	}
	bodies, msgs := eppChatBodies(200_000, b.N, 64, 8<<10)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := proccpu.Self()
	for i := range b.N {
		tokens(bodies, msgs, i)
	}
	b.ReportMetric(float64(proccpu.Self()-cpu0)/float64(b.N), "cpu-ns/op")
}
