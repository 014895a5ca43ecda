package datapath

import (
	"fmt"
	"net/http"
	"net/netip"
	"testing"

	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/spec"
)

// TestEndpointThatIsTheGatewayIsRefused: an endpoint that is a VIP:port the
// gateway serves, or its management API, is refused at Install (400
// endpoint_is_gateway naming the endpoint); nothing is bound for it.
func TestEndpointThatIsTheGatewayIsRefused(t *testing.T) {
	api := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), freePort(t))
	o := testOptions()
	o.GatewayAddrs = []netip.AddrPort{api}
	rt, _ := newTestRuntime(t, o)
	eng := startPathRecorder(t)
	served := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, eng.addr(), 1))
	served.Name = "served"
	if err := rt.Install(nil, served); err != nil {
		t.Fatal(err)
	}
	engine := epFor(t, eng.addr(), 1)
	for _, tc := range []struct {
		name string
		ep   netip.AddrPort
	}{
		{"another rule's VIP", served.Key.ListenAddr()},
		{"the management API", api},
		{"the management API, IPv4-mapped", netip.AddrPortFrom(netip.MustParseAddr("::ffff:127.0.0.1"), api.Port())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, engine, spec.Endpoint{ID: tc.ep.String(), Addr: tc.ep, Weight: 1})
			err := rt.Install(nil, r)
			ae, ok := apierror.As(err)
			if !ok || ae.Status != http.StatusBadRequest || ae.Code != apierror.CodeEndpointIsGateway || ae.Field != "endpoints[1].endpointIP" {
				t.Fatalf("Install = %v, want 400 %s at endpoints[1].endpointIP", err, apierror.CodeEndpointIsGateway)
			}
			if rt.listeners[r.Key.ListenAddr()] != nil {
				t.Fatal("a listener was bound for the refused rule")
			}
		})
	}
	t.Run("its own VIP", func(t *testing.T) {
		port := freePort(t)
		own := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port)
		r := newRule("127.0.0.1", port, spec.SelRoundRobin, spec.Endpoint{ID: own.String(), Addr: own, Weight: 1})
		if ae, ok := apierror.As(rt.Install(nil, r)); !ok || ae.Code != apierror.CodeEndpointIsGateway {
			t.Fatalf("Install = %v, want %s", ae, apierror.CodeEndpointIsGateway)
		}
	})
	t.Run("another port of the same address", func(t *testing.T) {
		r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, engine)
		if err := rt.Install(nil, r); err != nil {
			t.Fatal(err)
		}
	})
}

func TestLoopsTo(t *testing.T) {
	ap := netip.MustParseAddrPort
	var local localAddrs
	for _, tc := range []struct {
		ep, own string
		want    bool
	}{
		{"127.0.0.1:80", "127.0.0.1:80", true},
		{"127.0.0.1:81", "127.0.0.1:80", false},
		{"127.0.0.2:80", "127.0.0.1:80", false},
		{"127.0.0.2:80", "0.0.0.0:80", true},
		{"[::1]:80", "[::]:80", true},
		{"[::ffff:10.9.9.9]:80", "10.9.9.9:80", true},
		{"192.0.2.77:80", "0.0.0.0:80", false}, // TEST-NET: not a local address
	} {
		if got := loopsTo(ap(tc.ep), ap(tc.own), &local); got != tc.want {
			t.Errorf("loopsTo(%s, %s) = %v, want %v", tc.ep, tc.own, got, tc.want)
		}
	}
}

// TestForwardedForNotTrusted: the engine is told the address the gateway
// saw, not the client's claim, unless the gateway is configured to trust it.
func TestForwardedForNotTrusted(t *testing.T) {
	for _, tc := range []struct {
		trust bool
		want  string
	}{
		{false, "127.0.0.1"},
		{true, "6.6.6.6, 127.0.0.1"},
	} {
		t.Run(fmt.Sprintf("trust %v", tc.trust), func(t *testing.T) {
			o := testOptions()
			o.TrustForwardedFor = tc.trust
			rt, _ := newTestRuntime(t, o)
			eng := startPathRecorder(t)
			r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, eng.addr(), 1))
			if err := rt.Install(nil, r); err != nil {
				t.Fatal(err)
			}
			res := post(t, testClient(), ruleURL(r)+"/v1/completions", `{"model":"m","prompt":"x"}`, "X-Forwarded-For", "6.6.6.6")
			if res.status != http.StatusOK {
				t.Fatalf("status %d %s", res.status, res.body)
			}
			h := eng.headers()
			if got := h[len(h)-1].Values("X-Forwarded-For"); len(got) != 1 || got[0] != tc.want {
				t.Errorf("trust %v: the engine got X-Forwarded-For %q, want %q", tc.trust, got, tc.want)
			}
		})
	}
}
