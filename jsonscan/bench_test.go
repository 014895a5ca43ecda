package jsonscan

import (
	"encoding/json"
	"strings"
	"testing"
)

// BenchmarkWalk reads the routing fields of a 64 KiB request both ways, next
// to encoding/json.Valid on the same body (the floor a decode-based reader
// pays before it reads anything).
func BenchmarkWalk(b *testing.B) {
	body := []byte(`{"model":"m","prompt":"` + strings.Repeat(`The quick brown fox \"jumps\" over the lazy dog. `, 1300) +
		`","max_tokens":128,"strea\u006d":true,"stream_options":{"include_usage":true},"user":"alice"}`)
	b.Run("baseline-json.Valid", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if !json.Valid(body) {
				b.Fatal("invalid")
			}
		}
	})
	for _, tc := range []struct {
		name string
		mode Mode
	}{{"loose", Loose}, {"strict", Strict}} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				stream := false
				it := ObjectMembers(body, 0, tc.mode)
				for it.Next() {
					if m := it.Member(); m.KeyIs(body, "stream") {
						stream, _ = Bool(m.Value.Of(body))
					}
				}
				if it.Err() != nil || !stream {
					b.Fatal("walk failed")
				}
			}
		})
	}
}
