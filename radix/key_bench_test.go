package radix

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// BenchmarkChatKey builds the key of an ~8 KiB, 6-message conversation and,
// interleaved, decodes the same messages with encoding/json into typed
// structs (the obvious alternative), reporting x-encoding-json.
func BenchmarkChatKey(b *testing.B) {
	type part struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	type msg struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	var sb strings.Builder
	sb.WriteString(`[{"role":"system","content":` + jsonString(strings.Repeat("You are a careful assistant. ", 100)) + `}`)
	for i := range 5 {
		role := []string{"user", "assistant"}[i%2]
		fmt.Fprintf(&sb, `,{"role":%q,"content":[{"type":"text","text":%s}]}`, role, jsonString(strings.Repeat(fmt.Sprintf("turn %d says \"hi\"\n", i), 60)))
	}
	sb.WriteString("]")
	raw := json.RawMessage(sb.String())
	var keyT, jsonT []time.Duration
	buf := make([]byte, 0, 16<<10)
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		t0 := time.Now()
		k, err := AppendChatKey(buf[:0], raw, DefaultMaxKeyBytes)
		if err != nil || len(k) == 0 {
			b.Fatal(err)
		}
		t1 := time.Now()
		var ms []msg
		if err := json.Unmarshal(raw, &ms); err != nil {
			b.Fatal(err)
		}
		for _, m := range ms {
			var parts []part
			if m.Content[0] == '[' {
				_ = json.Unmarshal(m.Content, &parts)
			}
		}
		t2 := time.Now()
		if len(keyT) < 1<<16 {
			keyT, jsonT = append(keyT, t1.Sub(t0)), append(jsonT, t2.Sub(t1))
		}
	}
	k, j := p50(keyT), p50(jsonT)
	b.ReportMetric(float64(k.Nanoseconds()), "key-p50-ns")
	b.ReportMetric(float64(k)/float64(j), "x-encoding-json")
}

func jsonString(s string) string {
	out, _ := json.Marshal(s)
	return string(out)
}
