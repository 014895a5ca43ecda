package datapath

import (
	"net/http"
	"strings"
	"testing"

	"github.com/infergate/infergate/spec"
)

// TestEngineGetsExactlyOneRequestID: whatever X-Request-Id values a client
// sends on a single pool, the engine sees exactly one, the one the client
// is answered with; a second, over-long value never reaches it.
func TestEngineGetsExactlyOneRequestID(t *testing.T) {
	long := strings.Repeat("a", maxClientRequestID+1)
	tests := []struct {
		name string
		ids  []string
		want string // "" = minted
	}{
		{"one", []string{"trace-1"}, "trace-1"},
		{"two", []string{"trace-1", "trace-2"}, "trace-1"},
		{"short then over-long", []string{"trace-1", long}, "trace-1"},
		{"over-long then short", []string{long, "trace-2"}, ""},
	}
	rt, _ := newTestRuntime(t, testOptions())
	e := startEngine(t, "e")
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	c := testClient()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := len(e.Requests())
			req, err := http.NewRequest(http.MethodPost, ruleURL(r)+"/v1/completions", strings.NewReader(completionBody))
			if err != nil {
				t.Fatal(err)
			}
			req.Header[HeaderRequestID] = tc.ids
			res := do(t, c, req)
			if res.status != http.StatusOK {
				t.Fatalf("status %d %s", res.status, res.body)
			}
			got := e.Requests()
			if len(got) != before+1 {
				t.Fatalf("engine saw %d requests, want 1", len(got)-before)
			}
			ids := got[len(got)-1].Header.Values(HeaderRequestID)
			answered := res.header.Get(HeaderRequestID)
			if len(ids) != 1 || ids[0] != answered || (tc.want != "" && ids[0] != tc.want) {
				t.Fatalf("engine ids %q, client answered %q, want one id %q", ids, answered, tc.want)
			}
		})
	}
}
