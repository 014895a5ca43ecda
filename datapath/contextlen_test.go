package datapath

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/spec"
)

func TestContextTooLong(t *testing.T) {
	for _, tc := range []struct {
		tokens, window int
		want           bool
	}{
		{100, 0, false},    // window unknown: everything fits
		{0, 8, false},      // no prompt tokens
		{7, 8, false},      // room for one generated token
		{8, 8, true},       // fills the window: nothing left to generate
		{9, 8, true},       // longer than the window
		{4096, 4096, true}, // the boundary at a real size
	} {
		if got := contextTooLong(tc.tokens, tc.window); got != tc.want {
			t.Errorf("contextTooLong(%d, %d) = %v, want %v", tc.tokens, tc.window, got, tc.want)
		}
	}
}

func TestPairWindow(t *testing.T) {
	for _, tc := range []struct {
		rule, prefill, decode, want int
	}{
		{0, 0, 0, 0},
		{8192, 0, 0, 8192},
		{0, 4096, 0, 4096},
		{0, 0, 2048, 2048},
		{8192, 4096, 0, 4096},
		{8192, 0, 16384, 8192},
		{0, 4096, 2048, 2048},
	} {
		r := &spec.Rule{MaxModelLen: tc.rule, Endpoints: []spec.Endpoint{{MaxModelLen: tc.prefill}, {MaxModelLen: tc.decode}}}
		c := &compiled{rule: r, eps: []*endpoint{{}, {}}}
		if got := c.pairWindow(0, 1); got != tc.want {
			t.Errorf("rule %d prefill %d decode %d: window %d, want %d", tc.rule, tc.prefill, tc.decode, got, tc.want)
		}
	}
}

// TestPDContextLengthExceeded: on a P/D rule whose KV-exact tier tokenises
// the prompt, a prompt that does not fit the chosen pair's max_model_len is
// answered 400 context_length_exceeded and no leg reaches an engine; one
// that fits is served; without a known window nothing is refused.
func TestPDContextLengthExceeded(t *testing.T) {
	const words = 12 // the fake engine's /tokenize gives one token per word
	prompt := strings.TrimSpace(strings.Repeat("word ", words))
	for _, tc := range []struct {
		name         string
		rule, decode int  // max_model_len of the rule and of the decode endpoint
		noKV         bool // KV-exact off: the prompt is never tokenised
		status       int
	}{
		{"no window known", 0, 0, false, http.StatusOK},
		{"rule window fits", 64, 0, false, http.StatusOK},
		{"rule window filled", words, 0, false, http.StatusBadRequest},
		{"decode's own window too small", 64, 8, false, http.StatusBadRequest},
		{"prefill's window too small, decode's fits", 8, 64, false, http.StatusBadRequest},
		{"not tokenised: not checked", 8, 0, true, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newPDFleet(t, pdTestOptions(), spec.EngineVLLM, 1, 1, func(r *spec.Rule) {
				if !tc.noKV {
					r.KV = &spec.KV{Mode: 1, ZMQPort: 45557, BlockSize: 16, DPRanks: 1}
				}
				r.MaxModelLen = tc.rule
				for i := range r.Endpoints {
					if r.Endpoints[i].Role == spec.RoleDecode {
						r.Endpoints[i].MaxModelLen = tc.decode
					}
				}
			})
			body := fmt.Sprintf(`{"model":"fake-model","prompt":%q,"max_tokens":3}`, prompt)
			res := post(t, testClient(), f.url(pathCompletions), body)
			if res.status != tc.status {
				t.Fatalf("%d %s, want %d", res.status, res.body, tc.status)
			}
			legs := len(f.prefills[0].Records()) + len(f.decodes[0].Records())
			if tc.status == http.StatusOK {
				if legs != 2 {
					t.Fatalf("engines got %d legs, want 2", legs)
				}
				return
			}
			if code := errorCode(t, res.body); code != CodeContextLengthExceeded {
				t.Fatalf("code %q, want %s", code, CodeContextLengthExceeded)
			}
			if legs != 0 {
				t.Fatalf("engines got %d legs for a refused prompt, want none", legs)
			}
		})
	}
}

// TestPairWindowLearned: a window read from an engine applies where none is
// configured; a configured one (the endpoint's, else the rule's) wins.
func TestPairWindowLearned(t *testing.T) {
	for _, tc := range []struct {
		rule, prefill, decode         int // configured
		learnedPrefill, learnedDecode int64
		want                          int
	}{
		{0, 0, 0, 0, 0, 0},
		{0, 0, 0, 4096, 0, 4096},
		{0, 0, 0, 4096, 2048, 2048},
		{0, 0, 8192, 4096, 2048, 4096}, // the decode's configured window beats its learned one
		{16384, 0, 0, 4096, 2048, 16384},
	} {
		r := &spec.Rule{MaxModelLen: tc.rule, Endpoints: []spec.Endpoint{{MaxModelLen: tc.prefill}, {MaxModelLen: tc.decode}}}
		c := &compiled{rule: r, eps: []*endpoint{{}, {}}}
		c.eps[0].window.Store(tc.learnedPrefill)
		c.eps[1].window.Store(tc.learnedDecode)
		if got := c.pairWindow(0, 1); got != tc.want {
			t.Errorf("%+v: window %d, want %d", tc, got, tc.want)
		}
	}
}

// TestPDContextWindowLearned: with no max_model_len configured, the window
// the engines report on /v1/models is read (at install, then every
// refresh) and a prompt that does not fit it is refused before any leg;
// a window configured on the endpoint wins over the engine's.
func TestPDContextWindowLearned(t *testing.T) {
	const words = 12 // the fake engine's /tokenize gives one token per word
	prompt := strings.TrimSpace(strings.Repeat("word ", words))
	body := fmt.Sprintf(`{"model":"fake-model","prompt":%q,"max_tokens":3}`, prompt)
	for _, tc := range []struct {
		name       string
		configured int // the decode endpoint's max_model_len
		status     int
	}{
		{"learned window refuses", 0, http.StatusBadRequest},
		{"configured window wins", 64, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := pdTestOptions()
			o.Engine.ModelsRefresh = 20 * time.Millisecond
			f := newPDFleet(t, o, spec.EngineVLLM, 1, 1, func(r *spec.Rule) {
				r.KV = &spec.KV{Mode: 1, ZMQPort: 45557, BlockSize: 16, DPRanks: 1}
				for i := range r.Endpoints {
					if r.Endpoints[i].Role == spec.RoleDecode {
						r.Endpoints[i].MaxModelLen = tc.configured
					}
				}
			})
			// Not reported yet: nothing is known, the prompt is served.
			if res := post(t, testClient(), f.url(pathCompletions), body); res.status != http.StatusOK {
				t.Fatalf("before the engine reports a window: %d %s", res.status, res.body)
			}
			f.decodes[0].SetMaxModelLen(words - 4)
			f.prefills[0].SetMaxModelLen(4096)
			// A refusal ends the wait at once; a served prompt is asked
			// again for a while, long after the reads had their chance.
			wait := 5 * time.Second
			if tc.status == http.StatusOK {
				wait = time.Second
			}
			var res result
			for deadline := time.Now().Add(wait); ; {
				before := len(f.prefills[0].Records()) + len(f.decodes[0].Records())
				res = post(t, testClient(), f.url(pathCompletions), body)
				legs := len(f.prefills[0].Records()) + len(f.decodes[0].Records()) - before
				if res.status == http.StatusBadRequest {
					if code := errorCode(t, res.body); code != CodeContextLengthExceeded || legs != 0 {
						t.Fatalf("refused with %q after %d legs, want %s before any", code, legs, CodeContextLengthExceeded)
					}
					break
				}
				if time.Now().After(deadline) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if res.status != tc.status {
				t.Fatalf("after the engines reported windows: %d %s, want %d", res.status, res.body, tc.status)
			}
		})
	}
}
