package datapath

import (
	"net/http"
	"strings"
	"testing"

	"github.com/infergate/infergate/spec"
)

// TestPDPairCompatibility: with advertised pair facts (engines that
// registered themselves), a prefill pairs only with decodes sharing its
// block size and KV connector; when none does the request is refused with
// 503 no_compatible_pd_pair naming the difference. Real fake engines on
// loopback.
func TestPDPairCompatibility(t *testing.T) {
	facts := func(block, conn string) map[string]string {
		return map[string]string{"block_size": block, "kv_connector": conn}
	}
	tests := []struct {
		name     string
		decodes  [2]map[string]string
		status   int
		decodeOK int    // index of the decode that must serve (status 200)
		inBody   string // for the 503
	}{
		{"one decode fits", [2]map[string]string{facts("32", "NixlConnector"), facts("16", "NixlConnector")}, http.StatusOK, 1, ""},
		{"static decode pairs freely", [2]map[string]string{facts("32", "NixlConnector"), nil}, http.StatusOK, 1, ""},
		{"none fits", [2]map[string]string{facts("32", "NixlConnector"), facts("16", "mooncake")}, http.StatusServiceUnavailable, -1, CodeNoCompatiblePDPair},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newPDFleet(t, pdTestOptions(), spec.EngineVLLM, 1, 2, func(r *spec.Rule) {
				r.Endpoints[0].PairFacts = facts("16", "NixlConnector")
				r.Endpoints[1].PairFacts = tc.decodes[0]
				r.Endpoints[2].PairFacts = tc.decodes[1]
			})
			c := testClient()
			const n = 4
			for i := range n {
				res := post(t, c, f.url(pathCompletions), pdBody(pathCompletions, false, ""))
				if res.status != tc.status {
					t.Fatalf("request %d: %d %s, want %d", i, res.status, res.body, tc.status)
				}
				if tc.inBody != "" && (!strings.Contains(res.body, tc.inBody) || !strings.Contains(res.body, "prefill ")) {
					t.Fatalf("503 body %s does not name %s and the difference", res.body, tc.inBody)
				}
			}
			_, dec := f.legCounts()
			if tc.decodeOK >= 0 && (dec[tc.decodeOK] != n || dec[1-tc.decodeOK] != 0) {
				t.Fatalf("decode legs %v, want all %d on decode %d", dec, n, tc.decodeOK)
			}
			if tc.decodeOK < 0 && dec[0]+dec[1] != 0 {
				t.Fatalf("an incompatible pair ran: decode legs %v", dec)
			}
		})
	}
	if d := pairDifference(&spec.Endpoint{ID: "p", PairFacts: facts("16", "a")}, &spec.Endpoint{ID: "d", PairFacts: map[string]string{"kv_connector": "b"}}); d != "kv_connector: prefill p has a, decode d has b" {
		t.Fatalf("difference %q", d)
	}
}
