package datapath

import (
	"net/http"
	"testing"

	"github.com/infergate/infergate/spec"
)

// TestMoRIIOUnsplitGenerationRefused: on a vLLM rule with MoRI-IO
// endpoints, a generation API the sequence does not run (/v1/messages,
// which a NIXL rule sends to one decode) is answered 501
// moriio_route_unsupported before anything is sent; side paths still go to
// one prefill, and a NIXL rule keeps sending /v1/messages to a decode.
func TestMoRIIOUnsplitGenerationRefused(t *testing.T) {
	moriio := func(r *spec.Rule) {
		for i := range r.Endpoints {
			r.Endpoints[i].PairFacts = map[string]string{spec.FactKVConnector: "MoRIIOConnector"}
			r.Endpoints[i].Labels = map[string]string{"moriio_mode": "read"}
		}
	}
	messages := `{"model":"m","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct {
		name        string
		mod         []func(*spec.Rule)
		path, body  string
		status      int
		code        string
		legs, sides int // decode legs / prefill requests the engines saw
	}{
		{"moriio messages", []func(*spec.Rule){moriio}, pathMessages, messages, http.StatusNotImplemented, "moriio_route_unsupported", 0, 0},
		{"moriio tokenize", []func(*spec.Rule){moriio}, pathTokenize, `{"model":"m","prompt":"hi"}`, http.StatusOK, "", 0, 1},
		{"nixl messages", nil, pathMessages, messages, http.StatusOK, "", 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newPDFleet(t, pdTestOptions(), spec.EngineVLLM, 1, 1, tc.mod...)
			res := post(t, testClient(), f.url(tc.path), tc.body)
			if res.status != tc.status || res.header.Get(HeaderError) != tc.code {
				t.Fatalf("got %d %q %s, want %d %q", res.status, res.header.Get(HeaderError), res.body, tc.status, tc.code)
			}
			pre, dec := f.sideCounts()
			if got := len(f.decodes[0].Records()) + dec[0]; got != tc.legs {
				t.Errorf("decode saw %d requests, want %d", got, tc.legs)
			}
			if got := len(f.prefills[0].Records()) + pre[0]; got != tc.sides {
				t.Errorf("prefill saw %d requests, want %d", got, tc.sides)
			}
		})
	}
}
