package datapath

import (
	"net/http"
	"strings"
	"testing"

	"github.com/infergate/infergate/datapath/ladder"
	"github.com/infergate/infergate/radix"
)

// TestPDFactsKeyBuffer: the prompt key's buffer comes from the
// generation's pool and goes back to it, also when no key is built (a
// path without a prompt), so such requests do not drain the pool.
func TestPDFactsKeyBuffer(t *testing.T) {
	const held = 64 << 10
	tests := []struct {
		name, path, body string
		key              bool
	}{
		{"completion keyed", pathCompletions, `{"model":"m","prompt":"a long shared prefix"}`, true},
		{"chat keyed", pathChatCompletions, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, true},
		{"responses has no key", pathResponses, `{"model":"m","input":"hi"}`, false},
		{"chat without messages", pathChatCompletions, `{"model":"m","prompt":"hi"}`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rt := &Runtime{opts: Options{PrefixIndex: radix.DefaultOptions()}}
			c := &compiled{pd: &pdView{prefix: ladder.NewPrefixTier(ladder.PrefixOptions{})}}
			c.pd.keys.Put(make([]byte, 0, held))
			r, _ := http.NewRequest(http.MethodPost, "http://gw"+tc.path, strings.NewReader(tc.body))
			f := rt.pdFacts(c, r, []byte(tc.body))
			if got := f.PromptKey != nil; got != tc.key {
				t.Fatalf("prompt key built: %v, want %v (%q)", got, tc.key, f.PromptKey)
			}
			if want := map[bool]int{true: 0, false: held}[tc.key]; c.pd.keys.Held() != want {
				t.Errorf("pool holds %d while the request runs, want %d", c.pd.keys.Held(), want)
			}
			c.releaseFacts(&f)
			if c.pd.keys.Held() != held {
				t.Errorf("pool holds %d after the request, want %d", c.pd.keys.Held(), held)
			}
		})
	}
}
