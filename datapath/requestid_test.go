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
		key  string // as sent; "" = HeaderRequestID
		ids  []string
		want string // "" = minted
	}{
		{"none", "", nil, ""},
		{"one", "", []string{"trace-1"}, "trace-1"},
		{"two", "", []string{"trace-1", "trace-2"}, "trace-1"},
		{"short then over-long", "", []string{"trace-1", long}, "trace-1"},
		{"over-long then short", "", []string{long, "trace-2"}, ""},
		{"lower-case name", "x-request-id", []string{"trace-3"}, "trace-3"},
		{"lower-case name, two", "x-request-id", []string{"trace-4", "trace-5"}, "trace-4"},
		{"odd-case name", "X-REQUEST-ID", []string{"trace-6"}, "trace-6"},
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
			key := tc.key
			if key == "" {
				key = HeaderRequestID
			}
			if tc.ids != nil {
				req.Header[key] = tc.ids // as spelled: the client sends keys as given
			}
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
			if tc.want == "" && !hex32.MatchString(answered) {
				t.Fatalf("minted id %q is not 32 lower-case hex digits", answered)
			}
		})
	}
}

// TestRequestIDSetByHook: a header the serve hook edits is read as it
// stands after the hook (the front end's account of what it parsed no
// longer holds): the id the hook sets is the one the engine and the
// client see.
func TestRequestIDSetByHook(t *testing.T) {
	rt, _ := newTestRuntime(t, testOptions())
	rt.hookServe = func(r *http.Request) { r.Header[HeaderRequestID] = []string{"hooked", "second"} }
	e := startEngine(t, "e")
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	res := post(t, testClient(), ruleURL(r)+"/v1/completions", completionBody)
	if res.status != http.StatusOK {
		t.Fatalf("status %d %s", res.status, res.body)
	}
	got := e.Requests()
	if ids := got[len(got)-1].Header.Values(HeaderRequestID); len(ids) != 1 || ids[0] != "hooked" || res.header.Get(HeaderRequestID) != "hooked" {
		t.Fatalf("engine ids %q, client answered %q, want hooked", ids, res.header.Get(HeaderRequestID))
	}
}
