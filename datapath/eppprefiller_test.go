package datapath

import (
	"context"
	"net/http"
	"testing"

	"github.com/infergate/infergate/spec"
	"github.com/infergate/infergate/test/extprocclient"
)

// A client's own x-prefiller-host-port never reaches the decode's sidecar:
// a P/D pick that names a prefill overwrites it, and one that names none
// (a side path, a request a role-0 endpoint takes unsplit) sets it empty,
// as llm-d's EPP clears it. Otherwise the sidecar would run the prefill at
// whatever address the client chose.
func TestEPPClientPrefillerHeaderCleared(t *testing.T) {
	const forged = "203.0.113.9:80"
	f := newPDFleet(t, pdTestOptions(), spec.EngineVLLM, 1, 2)
	_, addr, _ := serveEPP(t, f.rt.EPPPicker(f.rule.Name), true)
	cc, err := extprocclient.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	prefills := addrs(f.rule, spec.RolePrefill)
	cases := []struct {
		name, method, path string
		body               string
		wantPrefill        bool // the header names one of the rule's prefills; else it is set empty
	}{
		{"generation: the pick's prefill", "POST", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hello"}]}`, true},
		{"side path: no prefill", "GET", "/v1/models", "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			x, err := extprocclient.Start(context.Background(), cc, extprocclient.Request{
				Headers: extprocclient.Headers(":method", tc.method, ":path", tc.path, ":authority", "gw", HeaderPrefillerHostPort, forged),
				Body:    []byte(tc.body),
			})
			if err != nil {
				t.Fatal(err)
			}
			defer x.Close()
			pk, err := x.Pick()
			if err != nil || pk.Status != 0 {
				t.Fatalf("pick: %v (refused %d %s)", err, pk.Status, pk.Reason)
			}
			got, set := pk.Headers[HeaderPrefillerHostPort]
			switch {
			case !set:
				t.Errorf("the client's %s: %s is left as it came (the pick sets nothing)", HeaderPrefillerHostPort, forged)
			case tc.wantPrefill && !contains(prefills, got):
				t.Errorf("%s set to %q, want one of the prefills %v", HeaderPrefillerHostPort, got, prefills)
			case !tc.wantPrefill && got != "":
				t.Errorf("%s set to %q, want it cleared", HeaderPrefillerHostPort, got)
			}
			if err := x.Respond(http.StatusOK, pk.Endpoints[0]); err != nil {
				t.Fatal(err)
			}
			if err := x.Finish(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
