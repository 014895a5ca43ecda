package jsonscan

import (
	"encoding/json"
	"strconv"
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

// BenchmarkLongString validates and decodes the prompt of a 400 KB request
// three ways: plain words, code with an escape every dozen bytes or so
// (code and JSON pasted into an agent's prompt), and text dense with
// escapes.
func BenchmarkLongString(b *testing.B) {
	var plain strings.Builder
	for i := 0; plain.Len() < 400<<10; i++ {
		plain.WriteString("word")
		plain.WriteString(strconv.Itoa(i))
		plain.WriteByte(' ')
	}
	for _, tc := range []struct{ name, text string }{
		{"plain", plain.String()},
		{"code", strings.Repeat(`\tif err != nil {\n\t\treturn fmt.Errorf(\"read %s: %w\", name, err)\n\t}\n`, 400<<10/70)},
		{"dense", strings.Repeat(`if (x) {\n\treturn \"caf\u00e9\";\n}\n`, 400<<10/40)},
	} {
		s := []byte(`"` + tc.text + `"`)
		b.Run("scan/"+tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(s)))
			for b.Loop() {
				if _, _, ok := ScanString(s, 0); !ok {
					b.Fatal("invalid")
				}
			}
		})
		buf := make([]byte, 0, len(s))
		b.Run("unescape/"+tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(s)))
			for b.Loop() {
				var err error
				if buf, err = AppendUnescaped(buf[:0], s[1:len(s)-1]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
