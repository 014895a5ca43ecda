package datapath

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/infergate/infergate/metrics"
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

// TestRequestIDOnEveryAnswer: on both plaintext front ends every answer
// carries the request id, the client's when it sent a valid one, whoever
// makes its head: the relay with the engine's fields as pairs or in the
// map (an engine answer with a hop-by-hop field is stripped there), and
// the gateway's own errors (an upgrade refused, an engine unreachable).
func TestRequestIDOnEveryAnswer(t *testing.T) {
	for _, fe := range []string{FrontEndLean, FrontEndNetHTTP} {
		t.Run(fe, func(t *testing.T) {
			o := testOptions()
			o.HTTPFrontEnd = fe
			rt := New(o, metrics.NewDatapath(prometheus.NewRegistry()), nil)
			closeAtEnd(t, rt)
			addr, _ := rawHopEngine(t)
			up := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, addr, 1))
			down := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, "127.0.0.1:"+strconv.Itoa(int(freePort(t))), 1))
			for _, r := range []*spec.Rule{up, down} {
				if err := rt.Install(nil, r); err != nil {
					t.Fatal(err)
				}
			}
			for _, tc := range []struct {
				name   string
				rule   *spec.Rule
				query  string
				fields string
				status string
			}{
				{name: "relayed", rule: up, status: "200"},
				{name: "relayed, hop field stripped", rule: up, query: "?r=2", status: "200"},
				{name: "relayed, Transfer-Encoding", rule: up, query: "?r=12", status: "200"},
				{name: "upgrade refused", rule: up, fields: "Connection: upgrade\r\nUpgrade: websocket\r\n", status: "501"},
				{name: "engine unreachable", rule: down, status: "502"},
			} {
				for _, id := range []string{"", "client-id-7"} {
					t.Run(tc.name+"/id="+id, func(t *testing.T) {
						fields := tc.fields
						if id != "" {
							fields += "X-Request-Id: " + id + "\r\n"
						}
						head, _ := hopExchange(t, tc.rule.Key.ListenAddr().String(), tc.query, fields)
						if !strings.HasPrefix(head, "HTTP/1.1 "+tc.status) {
							t.Fatalf("answer %q, want %s", head, tc.status)
						}
						got := regexp.MustCompile(`(?mi)^X-Request-Id: (.*)\r$`).FindAllStringSubmatch(head, -1)
						if len(got) != 1 || id != "" && got[0][1] != id || id == "" && !hex32.MatchString(got[0][1]) {
							t.Fatalf("answer's ids %q (client's %q): %q", got, id, head)
						}
					})
				}
			}
		})
	}
}

// TestIDMint: ids from a mint, across batch ends, are 32 lowercase hex
// digits each and all different, and a batch's ids are its text cut in
// turn (none shares a byte with another); a recycled exchange keeps its
// mint, and one without a mint mints alone.
func TestIDMint(t *testing.T) {
	for _, n := range []int{1, idBatch - 1, idBatch, idBatch + 1, 3*idBatch + 2} {
		var m idMint
		seen := map[string]bool{}
		var batch, cut string // the current batch's text; its ids so far
		for i := range n {
			id := m.next()
			if !hex32.MatchString(id) || seen[id] {
				t.Fatalf("%d ids: id %d is %q (bad or repeated)", n, i, id)
			}
			seen[id] = true
			if i%idBatch == 0 {
				batch, cut = id+m.left, ""
			}
			if cut += id; !strings.HasPrefix(batch, cut) || len(cut)+len(m.left) != len(batch) {
				t.Fatalf("%d ids: id %d is not the batch's next %d bytes", n, i, requestIDLen)
			}
		}
	}

	w := &benchWriter{}
	x := newExchange(w)
	if x.mint == nil {
		t.Fatal("a recyclable exchange has no mint")
	}
	first := x.mint.next()
	m := x.mint
	if y := newExchange(w); y != x || y.mint != m {
		t.Fatal("the recycled exchange lost its mint")
	}
	if next := x.mint.next(); next == first || !hex32.MatchString(next) {
		t.Fatalf("second id %q after %q", next, first)
	}
	if id := (&exchange{}).mint.next(); !hex32.MatchString(id) {
		t.Fatalf("an exchange without a mint minted %q", id)
	}
}
