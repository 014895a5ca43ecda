package datapath

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/datapath/pick"
	"github.com/infergate/infergate/epp"
	"github.com/infergate/infergate/spec"
	"github.com/infergate/infergate/test/eppconformance"
	"github.com/infergate/infergate/test/extprocclient"
	"github.com/prometheus/client_golang/prometheus"
)

// recordingPicker passes through to the rule's picker and keeps the served
// reports, so the conformance suite can see its feedback arrive.
type recordingPicker struct {
	*EPPPicker
	mu     sync.Mutex
	served []string
}

func (p *recordingPicker) Served(o epp.Outcome) {
	p.EPPPicker.Served(o)
	if o.Endpoint != "" {
		p.mu.Lock()
		p.served = append(p.served, o.Endpoint)
		p.mu.Unlock()
	}
}

func (p *recordingPicker) list() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.served...)
}

// serveEPP serves picker over loopback until the test ends; it returns the
// ext_proc and health addresses.
func serveEPP(t *testing.T, p epp.Picker, ready bool) (*epp.Server, string, string) {
	t.Helper()
	srv, err := epp.New(epp.DefaultOptions(), p, epp.NewMetrics(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hlis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis, hlis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("epp serve: %v", err)
		}
	})
	srv.SetReady(ready)
	return srv, lis.Addr().String(), hlis.Addr().String()
}

// fakeEndpoints starts n fake engines named prefix0… and returns them as
// endpoints of weight 1.
func fakeEndpoints(t *testing.T, prefix string, n int) []spec.Endpoint {
	t.Helper()
	eps := make([]spec.Endpoint, 0, n)
	for i := range n {
		eps = append(eps, epFor(t, startEngine(t, fmt.Sprintf("%s%d", prefix, i)).Addr(), 1))
	}
	return eps
}

// chwblRule installs a CHWBL single pool over n fake engines.
func chwblRule(t *testing.T, rt *Runtime, n int) *spec.Rule {
	t.Helper()
	eps := fakeEndpoints(t, "e", n)
	r := newRule("127.0.0.1", freePort(t), spec.SelCHWBL, eps...)
	r.Name = "epp-pool"
	r.CircuitBreaker = true
	r.CHWBL = &spec.CHWBL{PrefixHashLevel: 1, MeanLoadFactor: 175, Replication: 100}
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	return r
}

func addrs(r *spec.Rule, role spec.Role) []string {
	var out []string
	for _, e := range r.Endpoints {
		if role == spec.RoleAny || e.Role == role {
			out = append(out, e.Addr.String())
		}
	}
	return out
}

// TestEPPConformance runs the black-box EPP suite against infergate proper:
// the ext_proc server over a real rule's ladder (a CHWBL pool of fake
// engines on loopback).
func TestEPPConformance(t *testing.T) {
	rt, _ := newTestRuntime(t, testOptions())
	r := chwblRule(t, rt, 4)
	p := &recordingPicker{EPPPicker: rt.EPPPicker(r.Name)}
	_, addr, haddr := serveEPP(t, p, true)
	eppconformance.Run(t, eppconformance.Target{
		Addr:                addr,
		HealthAddr:          haddr,
		Pool:                addrs(r, spec.RoleAny),
		RefusalReasonHeader: epp.DefaultRefusalReasonHeader,
		Affinity:            true,
		Served:              p.list,
		Goroutines:          func() (int, error) { return runtime.NumGoroutine(), nil },
	})
	assertSettled(t, rt.rules[r.Key].cur.Load())
}

// assertSettled: every pick was settled, nothing is left in flight.
func assertSettled(t *testing.T, c *compiled) {
	t.Helper()
	for i, ep := range c.eps {
		if n := ep.active.Load(); n != 0 {
			t.Errorf("endpoint %s still has %d in flight after the suite", c.rule.Endpoints[i].ID, n)
		}
	}
}

func chatReq(conversation, prompt string, subset []string) *epp.Request {
	h := epp.Headers{":method": {"POST"}, ":path": {"/v1/chat/completions"}, ":authority": {"gw"}}
	if conversation != "" {
		h["x-conversation-id"] = []string{conversation}
	}
	body := fmt.Sprintf(`{"model":"m","messages":[{"role":"system","content":%q},{"role":"user","content":"hi"}]}`, prompt)
	return &epp.Request{Headers: h, Body: []byte(body), Subset: subset}
}

// pickServe picks and reports the request served by the primary with status.
func pickServe(t *testing.T, p epp.Picker, req *epp.Request, status int) epp.Result {
	t.Helper()
	res, err := p.Pick(context.Background(), req)
	if err != nil {
		t.Fatalf("pick: %v", err)
	}
	p.Served(epp.Outcome{Result: res, Endpoint: res.Endpoints[0], Status: status, Complete: true})
	return res
}

// TestEPPAffinity: the turns of one conversation land on one endpoint, on a
// P/D rule (Tier 0 session pin and Tier 1 prefix; the decode is the
// destination and the prefill rides in x-prefiller-host-port) and on a
// CHWBL single pool (prefix hash).
func TestEPPAffinity(t *testing.T) {
	t.Run("pd", func(t *testing.T) {
		f := newPDFleet(t, pdTestOptions(), spec.EngineVLLM, 2, 2)
		p := f.rt.EPPPicker(f.rule.Name)
		decodes, prefills := addrs(f.rule, spec.RoleDecode), addrs(f.rule, spec.RolePrefill)
		for c := range 4 {
			conv := fmt.Sprintf("conv-%d", c)
			var dest, prefill string
			for k := range 4 {
				res := pickServe(t, p, chatReq(conv, fmt.Sprintf("system prompt %d %0200d", c, k), nil), http.StatusOK)
				pre := res.Headers[HeaderPrefillerHostPort]
				if !contains(decodes, res.Endpoints[0]) || !contains(prefills, pre) {
					t.Fatalf("pick %v prefill %q: want a decode destination and a prefill header", res.Endpoints, pre)
				}
				if len(res.Endpoints) != 2 || !contains(decodes, res.Endpoints[1]) {
					t.Errorf("fallbacks %v: want the other decode", res.Endpoints[1:])
				}
				if k == 0 {
					dest, prefill = res.Endpoints[0], pre
				} else if res.Endpoints[0] != dest || pre != prefill {
					t.Errorf("%s turn %d: %s via %s, earlier turns %s via %s", conv, k, res.Endpoints[0], pre, dest, prefill)
				}
			}
		}
	})
	t.Run("chwbl", func(t *testing.T) {
		rt, _ := newTestRuntime(t, testOptions())
		r := chwblRule(t, rt, 3)
		p := rt.EPPPicker(r.Name)
		homes := map[string]bool{}
		for c := range 8 {
			prompt := fmt.Sprintf("conversation %d shares this long system prompt %0300d", c, c)
			var home string
			for k := range 4 {
				res := pickServe(t, p, chatReq("", prompt, nil), http.StatusOK)
				if len(res.Endpoints) != 3 {
					t.Errorf("pick %v: want the choice then both other endpoints", res.Endpoints)
				}
				if k == 0 {
					home = res.Endpoints[0]
					homes[home] = true
				} else if res.Endpoints[0] != home {
					t.Errorf("conversation %d turn %d went to %s, earlier to %s", c, k, res.Endpoints[0], home)
				}
			}
		}
		if len(homes) < 2 {
			t.Errorf("8 conversations all went to %v", homes)
		}
	})
}

func contains(l []string, s string) bool {
	for _, e := range l {
		if e == s {
			return true
		}
	}
	return false
}

// TestEPPSubsetAndRefusals: picks stay inside the subset hint (P/D: the
// decode), a subset with nothing eligible or an unknown rule is a 503, and
// every pick's in-flight charge is given back by Served.
func TestEPPSubsetAndRefusals(t *testing.T) {
	rt, _ := newTestRuntime(t, testOptions())
	r := chwblRule(t, rt, 4)
	p := rt.EPPPicker(r.Name)
	all := addrs(r, spec.RoleAny)
	for _, sub := range [][]string{all[:1], all[1:3], {all[3], "10.9.9.9:1"}} {
		for k := range 8 {
			res := pickServe(t, p, chatReq("", fmt.Sprintf("prompt %d", k), sub), http.StatusOK)
			for _, e := range res.Endpoints {
				if !contains(sub, e) {
					t.Fatalf("subset %v: picked %v", sub, res.Endpoints)
				}
			}
		}
	}
	cases := []struct {
		name   string
		picker epp.Picker
		subset []string
		reason string
	}{
		{"subset outside the pool", p, []string{"10.9.9.9:1"}, reasonNoEligible},
		{"unknown rule", rt.EPPPicker("no-such-rule"), nil, reasonNoRule},
	}
	for _, tc := range cases {
		_, err := tc.picker.Pick(context.Background(), chatReq("", "x", tc.subset))
		var ref *epp.Refusal
		if !errors.As(err, &ref) || ref.Status != http.StatusServiceUnavailable || ref.Reason != tc.reason {
			t.Errorf("%s: got %v, want 503 %s", tc.name, err, tc.reason)
		}
	}
	if rt.EPPPicker("no-such-rule").Ready() || !p.Ready() {
		t.Error("Ready must follow the rule's existence")
	}

	// A pick holds its in-flight slot until Served.
	res, err := p.Pick(context.Background(), chatReq("", "held", nil))
	if err != nil {
		t.Fatal(err)
	}
	c := rt.rules[r.Key].cur.Load()
	i := c.indexOfAddr(res.Endpoints[0])
	if n := c.eps[i].active.Load(); n != 1 {
		t.Errorf("in flight on the pick = %d, want 1", n)
	}
	p.Served(epp.Outcome{Result: res, Err: context.Canceled})
	if n := c.eps[i].active.Load(); n != 0 {
		t.Errorf("in flight after Served = %d, want 0", n)
	}

	// The empty subset is refused by the server before the picker is asked;
	// through the ext_proc server it is a 503 as well (the conformance
	// suite's SubsetEmpty checks that over the wire).
}

// TestEPPServedFeedsBreaker: 5xx reports open the served endpoint's breaker
// (the pool then picks around it), a report of a fallback counts as a
// connect failure of the primary, and an answer after the open window closes
// the breaker again.
func TestEPPServedFeedsBreaker(t *testing.T) {
	o := testOptions()
	o.Breaker5xxStreak = 3
	o.BreakerConnectFailures = 2
	o.BreakerOpenFor = time.Hour
	rt, _ := newTestRuntime(t, o)
	r := chwblRule(t, rt, 2)
	p := rt.EPPPicker(r.Name)
	c := rt.rules[r.Key].cur.Load()
	req := chatReq("", "one prompt that always hashes home", nil)

	home := pickServe(t, p, req, http.StatusOK).Endpoints[0]
	hi := c.indexOfAddr(home)
	for range 3 {
		if got := pickServe(t, p, req, http.StatusInternalServerError).Endpoints[0]; got != home {
			t.Fatalf("picked %s before the breaker opened, want home %s", got, home)
		}
	}
	if s := c.eps[hi].br.state.Load(); s != breakerOpen {
		t.Fatalf("home breaker %s after three 5xx, want open", breakerName(s))
	}
	res := pickServe(t, p, req, http.StatusOK)
	if res.Endpoints[0] == home || len(res.Endpoints) != 1 {
		t.Fatalf("with home's breaker open the pick is %v, want only the other endpoint", res.Endpoints)
	}

	// The other endpoint: the proxy reports the request served elsewhere
	// twice (the primary did not take it) → connect failures open it.
	other := res.Endpoints[0]
	oi := c.indexOfAddr(other)
	c.eps[hi].br.state.Store(breakerClosed) // bring home back for the fallback
	for range 2 {
		res, err := p.Pick(context.Background(), chatReq("", "a prompt", []string{other}))
		if err != nil {
			t.Fatal(err)
		}
		p.Served(epp.Outcome{Result: res, Endpoint: home, Status: http.StatusOK, Complete: true})
	}
	if s := c.eps[oi].br.state.Load(); s != breakerOpen {
		t.Fatalf("primary breaker %s after two fallbacks, want open", breakerName(s))
	}

	// Open window over: the next pick is the half-open trial; a 200 closes it.
	c.eps[oi].br.openUntil.Store(time.Now().Add(-time.Second).UnixNano())
	res, err := p.Pick(context.Background(), chatReq("", "a prompt", []string{other}))
	if err != nil {
		t.Fatal(err)
	}
	if s := c.eps[oi].br.state.Load(); s != breakerHalfOpen {
		t.Fatalf("breaker %s after the trial pick, want half-open", breakerName(s))
	}
	p.Served(epp.Outcome{Result: res, Endpoint: other, Status: http.StatusOK, Complete: true})
	if s := c.eps[oi].br.state.Load(); s != breakerClosed {
		t.Fatalf("breaker %s after the trial answered 200, want closed", breakerName(s))
	}
}

// chwblBenchRule installs the EPP benchmarks' pool: CHWBL over 16
// endpoints that are never dialed, with circuit breaking; the runtime is
// closed when the benchmark ends.
func chwblBenchRule(b *testing.B) (*Runtime, *spec.Rule) {
	b.Helper()
	rt := New(testOptions(), nil, nil)
	b.Cleanup(func() { _ = rt.Close(context.Background()) })
	var eps []spec.Endpoint
	for i := range 16 {
		a := fmt.Sprintf("10.0.0.%d:8000", i+1)
		eps = append(eps, spec.Endpoint{ID: a, Addr: mustAddrPort(a), Weight: 1})
	}
	r := newRule("127.0.0.1", freePort(b), spec.SelCHWBL, eps...)
	r.Name, r.CircuitBreaker = "bench", true
	r.CHWBL = &spec.CHWBL{PrefixHashLevel: 2, MeanLoadFactor: 175, Replication: 100}
	if err := rt.Install(nil, r); err != nil {
		b.Fatal(err)
	}
	return rt, r
}

// BenchmarkEPPPick: one pick and its settling on a CHWBL pool of 16
// endpoints with an 8 KB chat body — the ladder's share of an EPP pick,
// without gRPC (epp's BenchmarkPickLoopback measures the protocol's).
func BenchmarkEPPPick(b *testing.B) {
	rt, r := chwblBenchRule(b)
	p := rt.EPPPicker(r.Name)
	req := chatReq("", fmt.Sprintf("%08000d", 0), nil)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		res, err := p.Pick(context.Background(), req)
		if err != nil {
			b.Fatal(err)
		}
		p.Served(epp.Outcome{Result: res, Endpoint: res.Endpoints[0], Status: http.StatusOK, Complete: true})
	}
}

// shedBatch is a stand-in for flow control: it sheds the "batch" objective
// and admits the rest, counting what it admitted and what was given back.
type shedBatch struct {
	mu                 sync.Mutex
	demands            []pick.Demand
	admitted, released int
}

func (a *shedBatch) Admit(_ context.Context, d pick.Demand) (func(), error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.demands = append(a.demands, d)
	if d.Objective == "batch" {
		return nil, &pick.Shed{Reason: "sheddable_saturated"}
	}
	a.admitted++
	return func() {
		a.mu.Lock()
		a.released++
		a.mu.Unlock()
	}, nil
}

func (a *shedBatch) counts() (int, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.admitted, a.released
}

// TestEPPAdmissionSheds: flow control set on the picker sees the request's
// hints before the pick; its shed is the EPP's 429 with the reason header,
// charging no endpoint; an admitted request's slot is given back when its
// stream ends, and at once when the pick itself refuses it.
func TestEPPAdmissionSheds(t *testing.T) {
	rt, _ := newTestRuntime(t, testOptions())
	r := chwblRule(t, rt, 2)
	adm := &shedBatch{}
	p := rt.EPPPicker(r.Name)
	p.SetAdmission(adm)
	_, addr, _ := serveEPP(t, p, true)
	cc, err := extprocclient.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	send := func(objective string) extprocclient.Pick {
		t.Helper()
		body := []byte(`{"model":"m","messages":[{"role":"user","content":"hello"}]}`)
		hs := extprocclient.Headers(":method", "POST", ":path", "/v1/chat/completions", ":authority", "gw",
			epp.HeaderObjective, objective, epp.HeaderFairnessID, "tenant-a", epp.HeaderSLOTTFT, "250")
		x, err := extprocclient.Start(ctx, cc, extprocclient.Request{Headers: hs, Body: body})
		if err != nil {
			t.Fatal(err)
		}
		pk, err := x.Pick()
		if err != nil {
			t.Fatal(err)
		}
		if pk.Status == 0 {
			if err := x.Respond(http.StatusOK, pk.Endpoints[0]); err != nil {
				t.Fatal(err)
			}
		}
		if err := x.Finish(); err != nil {
			t.Fatal(err)
		}
		return pk
	}

	shed := send("batch")
	if shed.Status != http.StatusTooManyRequests || shed.Reason != "sheddable_saturated" ||
		shed.Headers[epp.DefaultRefusalReasonHeader] != "sheddable_saturated" {
		t.Errorf("batch request: %+v, want 429 with reason sheddable_saturated in the body and %s", shed, epp.DefaultRefusalReasonHeader)
	}
	assertSettled(t, rt.rules[r.Key].cur.Load())

	ok := send("critical")
	if ok.Status != 0 || len(ok.Endpoints) == 0 {
		t.Fatalf("critical request: %+v, want a pick", ok)
	}
	if a, rel := adm.counts(); a != 1 || rel != 1 {
		t.Errorf("after a served pick: admitted %d, released %d; want 1, 1", a, rel)
	}
	assertSettled(t, rt.rules[r.Key].cur.Load())

	// A pick the rule refuses after admission gives the slot back at once.
	req := chatReq("", "refused", []string{"192.0.2.1:1"}) // a subset outside the pool: 503
	req.Hints.Objective = "critical"
	if _, err := p.Pick(ctx, req); err == nil {
		t.Fatal("pick inside a subset outside the pool succeeded")
	}
	if a, rel := adm.counts(); a != 2 || rel != 2 {
		t.Errorf("after a refused pick: admitted %d, released %d; want 2, 2", a, rel)
	}

	want := pick.Demand{Rule: r.Name, Objective: "critical", FairnessID: "tenant-a", TTFT: 250 * time.Millisecond}
	if got := adm.demands[1]; got != want {
		t.Errorf("demand = %+v, want %+v", got, want)
	}
}
