package ladder

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/infergate/infergate/radix"
)

func TestPromptKey(t *testing.T) {
	chatKey := func(m string) []byte {
		k, err := radix.ChatKey(json.RawMessage(m))
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	complKey := func(p string) []byte {
		k, err := radix.CompletionKey(json.RawMessage(p))
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	msgs := `[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]`
	tests := []struct {
		name string
		path string
		body string
		want []byte
	}{
		{"chat", "/v1/chat/completions", `{"model":"m","messages":` + msgs + `}`, chatKey(msgs)},
		{"chat, fields around and nested decoys", "/v1/chat/completions",
			`{"x":{"messages":[1]},"s":"\"messages\"","messages":` + msgs + `,"prompt":"no"}`, chatKey(msgs)},
		{"completion string", "/v1/completions", `{"prompt":"hello world","max_tokens":3}`, complKey(`"hello world"`)},
		{"completion tokens", "/v1/completions", ` { "prompt" : [1,2,3] } `, complKey(`[1,2,3]`)},
		{"chat path ignores prompt", "/v1/chat/completions", `{"prompt":"x"}`, nil},
		{"completion path ignores messages", "/v1/completions", `{"messages":` + msgs + `}`, nil},
		{"unknown path takes messages", "", `{"messages":` + msgs + `}`, chatKey(msgs)},
		{"no prompt", "/v1/completions", `{"model":"m"}`, nil},
		{"null prompt", "/v1/completions", `{"prompt":null}`, nil},
		{"empty messages", "/v1/chat/completions", `{"messages":[]}`, nil},
		{"not an object", "/v1/completions", `["prompt"]`, nil},
		{"truncated body", "/v1/completions", `{"prompt":"abc`, nil},
		{"malformed messages", "/v1/chat/completions", `{"messages":{"a":1}}`, nil},
		{"empty body", "/v1/completions", ``, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := PromptKey(tt.path, []byte(tt.body), make([]byte, 0, 64))
			if !bytes.Equal(got, tt.want) {
				t.Fatalf("PromptKey = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestPromptKeyCap(t *testing.T) {
	long := strings.Repeat("a", 1000)
	body := []byte(`{"prompt":"` + long + `"}`)
	got := AppendPromptKey(nil, "/v1/completions", body, 100)
	if len(got) != 100 || string(got) != long[:100] {
		t.Fatalf("capped key: %d bytes", len(got))
	}
}

// The field scanner agrees with encoding/json on where "prompt",
// "messages", "model" and "user" are, for any body encoding/json accepts as
// an object.
func FuzzTopLevelPrompt(f *testing.F) {
	for _, s := range []string{
		`{"prompt":"a","messages":[{"role":"user","content":"x"}]}`,
		`{"a":{"prompt":1},"prompt":[1,2],"b":"\\\""}`,
		`{"messages":null,"x":true,"y":-1.5e3}`,
		`{}`, `[]`, `{"prompt":"\u0041"}`,
		`{"model":"m","user":"u","prompt":"p"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var want map[string]json.RawMessage
		if json.Unmarshal(body, &want) != nil || want == nil {
			return
		}
		// encoding/json matches keys case-insensitively and unescapes them;
		// compare only bodies whose keys are plain and unique in case.
		seen := map[string]bool{}
		for k := range want {
			lk := strings.ToLower(k)
			if seen[lk] || (lk != k && (lk == radix.FieldPrompt || lk == radix.FieldMessages || lk == fieldModel || lk == fieldUser)) {
				return
			}
			seen[lk] = true
		}
		if bytes.Contains(body, []byte(`\u`)) || bytes.Contains(body, []byte(`\/`)) {
			return
		}
		fields := ScanBody(body)
		p, m := fields.Prompt, fields.Messages
		check := func(name string, got []byte) {
			w, ok := want[name]
			if !ok {
				if got != nil {
					t.Fatalf("%s: got %q, encoding/json has none", name, got)
				}
				return
			}
			if !bytes.Equal(bytes.TrimSpace(got), bytes.TrimSpace(w)) {
				t.Fatalf("%s: got %q, want %q", name, got, w)
			}
		}
		check(radix.FieldPrompt, p)
		check(radix.FieldMessages, m)
		check(fieldModel, fields.Model)
		check(fieldUser, fields.User)
	})
}

// FuzzPrefixTierInvariants: whatever is stored and asked, Pick only returns a
// candidate, agrees with Explain, and a hit meets the threshold and guard.
func FuzzPrefixTierInvariants(f *testing.F) {
	f.Add([]byte("shared system prompt, then a"), []byte("shared system prompt, then b"), uint8(20), uint8(3), uint8(3), []byte{0, 4, 1})
	f.Add([]byte{}, []byte("x"), uint8(0), uint8(0), uint8(1), []byte{9})
	f.Fuzz(func(t *testing.T, stored, query []byte, threshold, balance, nStored uint8, loads []byte) {
		ix, err := radix.New(radix.Options{ChunkBytes: 16, StepsPerDoubling: 0, MaxKeyBytes: 4096, BudgetBytes: 64 << 10})
		if err != nil {
			t.Fatal(err)
		}
		tier := NewPrefixTier(PrefixOptions{Index: ix, Threshold: int(threshold % 101), BalanceAbs: int(balance%8) - 1})
		for i := range int(nStored % 8) {
			key := append(append([]byte{}, stored...), byte(i))
			tier.Observe(&Facts{PromptKey: key}, Candidate{ID: fmt.Sprintf("p%d", i%5)})
		}
		if len(loads) == 0 || len(loads) > 8 {
			return
		}
		c := make([]Candidate, len(loads))
		for i, l := range loads {
			c[i] = Candidate{ID: fmt.Sprintf("p%d", i), Index: i, Load: int(l)}
		}
		f := &Facts{PromptKey: query}
		idx, reason, ok := tier.Pick(f, c)
		e := tier.Explain(f, c)
		if ok != e.Hit || reason != e.Reason {
			t.Fatalf("Pick (%d,%q,%v) vs Explain %+v", idx, reason, ok, e)
		}
		if !ok {
			if reason == "" {
				t.Fatal("miss without a reason")
			}
			return
		}
		if idx < 0 || idx >= len(c) || c[idx].ID != e.Endpoint {
			t.Fatalf("hit on non-candidate %d (%+v)", idx, e)
		}
		if !AboveThreshold(e.MatchedBytes, e.KeyBytes, e.Threshold) || LoadGuardTrips(c[idx].Load, minLoad(c), e.BalanceAbs) {
			t.Fatalf("hit breaks threshold or guard: %+v", e)
		}
	})
}

// BenchmarkPromptKey keys an 8 KiB completion and chat body, next to the
// baseline of encoding/json decoding the same body's prompt field.
func BenchmarkPromptKey(b *testing.B) {
	g := newBenchPrompts()
	p := string(g.prompt(nil, 1))
	compl, _ := json.Marshal(map[string]any{"model": "m", "prompt": p, "max_tokens": 16})
	chat, _ := json.Marshal(map[string]any{"model": "m", "messages": []map[string]string{
		{"role": "system", "content": p[:benchSystemBytes]}, {"role": "user", "content": p[benchSystemBytes:]}}})
	b.Run("baseline_encoding_json_completion", func(b *testing.B) {
		var v struct {
			Prompt string `json:"prompt"`
		}
		for b.Loop() {
			if err := json.Unmarshal(compl, &v); err != nil {
				b.Fatal(err)
			}
		}
	})
	kb := make([]byte, 0, len(compl))
	b.Run("completion", func(b *testing.B) {
		for b.Loop() {
			kb = PromptKey("/v1/completions", compl, kb)
		}
	})
	b.Run("chat", func(b *testing.B) {
		for b.Loop() {
			kb = PromptKey("/v1/chat/completions", chat, kb)
		}
	})
}

// TestScanBodyMatchesNamesAsTheEngine: escapes decoded, then an exact
// comparison (no case folding), the last duplicate winning.
func TestScanBodyMatchesNamesAsTheEngine(t *testing.T) {
	body := []byte(`{"strea\u006d":true,"max_toke\u006es":9,"Max_Completion_Tokens":5,"max_completion_tokens":7,"n":1,"n":8,"best_o\u0066":3,"MODEL":"x","mode\u006c":"m"}`)
	f := ScanBody(body)
	cases := []struct {
		name      string
		got, want []byte
	}{
		{"stream", f.Stream, []byte("true")},
		{"max_tokens", f.MaxTokens, []byte("9")},
		{"max_completion_tokens", f.MaxCompletionTokens, []byte("7")},
		{"n", f.N, []byte("8")},
		{"best_of", f.BestOf, []byte("3")},
		{"model", f.Model, []byte(`"m"`)},
		{"max_output_tokens", f.MaxOutputTokens, nil},
	}
	for _, tc := range cases {
		if !bytes.Equal(tc.got, tc.want) {
			t.Errorf("%s: got %q, want %q", tc.name, tc.got, tc.want)
		}
	}
}
