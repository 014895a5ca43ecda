package datapath

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/datapath/ladder"
	"github.com/infergate/infergate/datapath/pd/bufpool"
	"github.com/infergate/infergate/radix"
	"github.com/infergate/infergate/spec"
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
			c := &compiled{pd: &pdView{prefix: ladder.NewPrefixTier(ladder.PrefixOptions{}), keys: &bufpool.Pool{}}}
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

// TestPDBuffersShared: every P/D rule of a runtime, and every generation
// of one, takes its prompt keys and leg bodies from the runtime's one pool,
// so what an idle gateway keeps is bounded by Options.PDBuffers however
// many rules it serves. Two cache-aware rules get 400 KB prompts; the pool
// then holds buffers, within its bound.
func TestPDBuffersShared(t *testing.T) {
	const limit = 2 << 20
	o := pdTestOptions()
	o.PDBuffers.MaxBytes = limit
	cacheAware := func(r *spec.Rule) { r.PD.CacheAware = true }
	r1, _ := learnedPDRule(t, 70, 0, cacheAware)
	r2, _ := learnedPDRule(t, 73, 0, cacheAware)
	rt, _ := installWithMetrics(t, o, r1)
	if err := rt.Install(nil, r2); err != nil {
		t.Fatal(err)
	}
	next := *r2
	next.Generation++
	if err := rt.Install(r2, &next); err != nil {
		t.Fatal(err)
	}
	prompt := strings.Repeat("an agent's long context, ", 400<<10/25)
	body := `{"model":"m","max_tokens":4,"prompt":"` + prompt + `"}`
	client := testClient()
	for _, r := range []*spec.Rule{r1, &next} {
		for range 3 {
			resp, err := client.Post(ruleURL(r)+pathCompletions, "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%s: status %d", r.Name, resp.StatusCode)
			}
		}
		rt.mu.Lock()
		c := rt.rules[r.Key].cur.Load()
		rt.mu.Unlock()
		if c.pd.keys != rt.pdBuffers {
			t.Errorf("%s generation %d keeps its prompt keys in a pool of its own", r.Name, r.Generation)
		}
	}
	// The client can read the last answer before its handler gives the
	// buffer back, and sequential requests reuse one buffer, so the pool
	// may briefly hold nothing: wait (bounded) for the give-back.
	h := rt.pdBuffers.Held()
	for deadline := time.Now().Add(5 * time.Second); h == 0 && time.Now().Before(deadline); h = rt.pdBuffers.Held() {
		time.Sleep(5 * time.Millisecond)
	}
	if h == 0 || h > limit {
		t.Errorf("the shared pool holds %d bytes after six 400 KB prompts, want some and at most %d", h, limit)
	}
}
