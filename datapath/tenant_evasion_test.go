package datapath

import (
	"strconv"
	"strings"
	"testing"

	"github.com/infergate/infergate/internal/fakeengine"
	"github.com/infergate/infergate/tenant"
)

// TestTokenLimitCannotBeEvaded replays the request shapes that once let a
// 2,000 tokens/min key through many times its limit, against an engine that
// generates 100 tokens per choice whatever the body says. Each shape is sent
// until the key is refused: what the engine generated for the key must stay
// within one reservation of the limit, and the first admission must reserve
// at least the ceiling the engine will honour times the choices.
func TestTokenLimitCannotBeEvaded(t *testing.T) {
	const (
		limit     = 2000
		perChoice = 100 // the fake engine's tokens per choice
	)
	r, keys, _, _ := keyedRule(t, func(o *fakeengine.Options) { o.Tokens = perChoice })
	c := testClient()
	url := ruleURL(r) + "/v1/completions"
	cases := []struct {
		name string
		body string
		// choices is what the engine generates per request; reserve the
		// least first reservation.
		choices, reserve int
	}{
		{"usage turned off, no max", `{"model":"fake-model","prompt":"hi","stream":true,"stream_options":{"include_usage":false}}`, 1, tenant.DefaultOptions().DefaultMaxTokens},
		{"usage turned off twice", `{"model":"fake-model","prompt":"hi","stream":true,"stream_options":{"include_usage":true},"stream_options":{"include_usage":false}}`, 1, 1},
		{"usage turned off with an escaped name", `{"model":"fake-model","prompt":"hi","stream":true,"stream_options":{"include_usag\u0065":false}}`, 1, 1},
		{"escaped stream", `{"model":"fake-model","prompt":"hi","strea\u006d":true}`, 1, 1},
		{"stream_options null", `{"model":"fake-model","prompt":"hi","stream":true,"stream_options":null}`, 1, 1},
		{"escaped max_tokens", `{"model":"fake-model","prompt":"hi","stream":true,"max_toke\u006es":1500}`, 1, 1500},
		{"max_tokens 1, large max_completion_tokens", `{"model":"fake-model","prompt":"hi","max_tokens":1,"max_completion_tokens":1500}`, 1, 1500},
		{"n 8", `{"model":"fake-model","prompt":"hi","stream":true,"n":8,"max_tokens":100}`, 8, 800},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k, err := keys.Create(tenant.KeySpec{TenantID: "t", Name: tc.name, TokensPerMin: new(limit)})
			if err != nil {
				t.Fatal(err)
			}
			generated, admitted := 0, 0
			for range 60 {
				res := post(t, c, url, tc.body, "X-Api-Key", k.RawKey)
				if res.status == 429 {
					break
				}
				if res.status != 200 {
					t.Fatalf("status %d: %s", res.status, res.body)
				}
				if admitted == 0 {
					left, _ := strconv.Atoi(res.header.Get("X-Ratelimit-Remaining-Tokens"))
					if reserved := limit - left; reserved < tc.reserve {
						t.Fatalf("first admission reserved %d tokens, want ≥ %d", reserved, tc.reserve)
					}
				}
				if strings.Contains(res.body, `"choices":[]`) && !strings.Contains(tc.body, `"include_usage":true}`) {
					t.Fatalf("the usage chunk the gateway asked for reached the client: %q", res.body)
				}
				admitted++
				generated += perChoice * tc.choices
			}
			// One reservation: the largest a single admission may take.
			bound := limit + max(tc.reserve, tenant.DefaultOptions().DefaultMaxTokens)
			if generated > bound {
				t.Fatalf("%d requests admitted, %d tokens generated against a %d tokens/min key (bound %d)", admitted, generated, limit, bound)
			}
		})
	}
}
