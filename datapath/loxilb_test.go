package datapath

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/internal/fakeengine"
	"github.com/infergate/infergate/spec"
)

// adminStateUp false: the rule stays, its VIP answers 503 admin_down and no
// engine sees the request; turning it back on serves again.
func TestAdminDown(t *testing.T) {
	rt, _ := newTestRuntime(t, testOptions())
	e := startEngine(t, "e1")
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	r.AdminDown = true
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	c := testClient()
	res := post(t, c, ruleURL(r)+"/v1/completions", completionBody)
	if res.status != http.StatusServiceUnavailable || errorCode(t, res.body) != CodeAdminDown || res.header.Get(HeaderError) != CodeAdminDown {
		t.Fatalf("admin down: %d %s", res.status, res.body)
	}
	if n := len(e.Requests()); n != 0 {
		t.Fatalf("engine saw %d requests while admin down", n)
	}
	if st, _ := rt.Status(r.Key); st.Ready || st.Reason != reasonAdminDown {
		t.Fatalf("status %+v, want not ready: %s", st, reasonAdminDown)
	}
	up := *r
	up.Generation++
	up.AdminDown = false
	if err := rt.Install(r, &up); err != nil {
		t.Fatal(err)
	}
	if res := post(t, c, ruleURL(r)+"/v1/completions", completionBody); res.status != 200 {
		t.Fatalf("admin up again: %d %s", res.status, res.body)
	}
}

// A rule is served on its secondary VIPs too; dropping one frees it; a
// secondary VIP that is not local fails the install with nothing bound.
func TestSecondaryVIPs(t *testing.T) {
	rt, m := newTestRuntime(t, testOptions())
	e := startEngine(t, "e1")
	port := freePort(t)
	r := newRule("127.0.0.2", port, spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	r.SecondaryVIPs = []netip.Addr{netip.MustParseAddr("127.0.0.3"), netip.MustParseAddr("127.0.0.4")}
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	c := testClient()
	for _, vip := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"} {
		res := post(t, c, fmt.Sprintf("http://%s:%d/v1/completions", vip, port), completionBody)
		if res.status != 200 || res.header.Get(fakeengine.HeaderEngine) != "e1" {
			t.Fatalf("via %s: %d %s", vip, res.status, res.body)
		}
	}
	if got := metricValue(t, m.Listeners); got != 3 {
		t.Fatalf("listeners = %v, want 3", got)
	}
	less := *r
	less.Generation++
	less.SecondaryVIPs = r.SecondaryVIPs[:1]
	if err := rt.Install(r, &less); err != nil {
		t.Fatal(err)
	}
	if err := dialRefused(fmt.Sprintf("127.0.0.4:%d", port)); err != nil {
		t.Fatalf("dropped secondary VIP still listening: %v", err)
	}
	bad := less
	bad.Generation++
	bad.SecondaryVIPs = []netip.Addr{netip.MustParseAddr("127.0.0.5"), netip.MustParseAddr("192.0.2.50")}
	err := rt.Install(&less, &bad)
	ae, ok := apierror.As(err)
	if !ok || ae.Code != apierror.CodeBindFailed || ae.Field != "secondaryVIPs[1].address" {
		t.Fatalf("non-local secondary VIP: %v (%+v)", err, ae)
	}
	// All or nothing: 127.0.0.5 was not left bound, the old set still serves.
	if err := dialRefused(fmt.Sprintf("127.0.0.5:%d", port)); err != nil {
		t.Fatalf("half-applied secondary VIPs: %v", err)
	}
	if res := post(t, c, fmt.Sprintf("http://127.0.0.3:%d/v1/completions", port), completionBody); res.status != 200 {
		t.Fatalf("old secondary VIP after failed update: %d", res.status)
	}
	rt.Remove(&less)
	if got := metricValue(t, m.Listeners); got != 0 {
		t.Fatalf("listeners = %v after remove", got)
	}
}

// dialRefused returns nil when nothing listens on addr.
func dialRefused(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		c.Close()
		return errors.New("connected to " + addr)
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return nil
	}
	return err
}

// LoxiLB's per-endpoint httpMethod/urlPath/expectedCodes drive that
// endpoint's probe; the others keep the rule's.
func TestEndpointProbeOverride(t *testing.T) {
	rt, _ := newTestRuntime(t, testOptions())
	plain, badPath, codes := startEngine(t, "plain"), startEngine(t, "badpath"), startEngine(t, "codes")
	codes.SetHealth(http.StatusAccepted)
	rp := spec.Probe{Type: "http", Request: "/health", Timeout: time.Second, Retries: 1}
	eps := []spec.Endpoint{epFor(t, plain.Addr(), 1), epFor(t, badPath.Addr(), 1), epFor(t, codes.Addr(), 1)}
	own1, own2 := rp, rp
	own1.Request = "/not-health"
	own2.Method = http.MethodHead
	own2.Codes.Add(200, 200)
	eps[1].Probe, eps[2].Probe = &own1, &own2
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, eps...)
	r.Probe = rp
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	state := func(e *fakeengine.Server) string { st, _ := rt.Status(r.Key); return st.Endpoints[e.Addr()].State }
	waitFor(t, 5*time.Second, "probe verdicts", func() bool {
		return state(plain) == "active" && state(badPath) == "down" && state(codes) == "down"
	})
	// 202 is accepted once expectedCodes says so.
	own3 := own2
	own3.Codes.Add(202, 202)
	next := *r
	next.Generation++
	next.Endpoints = append([]spec.Endpoint(nil), eps...)
	next.Endpoints[2].Probe = &own3
	if err := rt.Install(r, &next); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "202 accepted", func() bool { return state(codes) == "active" })
}

// The endpoint counter counts requests that reached the engine and the body
// bytes relayed both ways.
func TestEndpointCounters(t *testing.T) {
	rt, _ := newTestRuntime(t, testOptions())
	e := startEngine(t, "e1")
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	c := testClient()
	var respBytes int
	for i := 0; i < 3; i++ {
		res := post(t, c, ruleURL(r)+"/v1/completions", completionBody)
		if res.status != 200 {
			t.Fatalf("request %d: %d", i, res.status)
		}
		respBytes += len(res.body)
	}
	st, _ := rt.Status(r.Key)
	es := st.Endpoints[e.Addr()]
	if want := uint64(3*len(completionBody) + respBytes); es.Requests != 3 || es.Bytes != want {
		t.Fatalf("counter = %d:%d, want 3:%d", es.Requests, es.Bytes, want)
	}
}
