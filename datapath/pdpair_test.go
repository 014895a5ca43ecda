package datapath

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/spec"
	logtest "github.com/sirupsen/logrus/hooks/test"
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
	if d := pairDifference(&spec.Endpoint{ID: "p", PairFacts: facts("16", "a")}, &spec.Endpoint{ID: "d", PairFacts: map[string]string{"kv_connector": "b"}}, false); d != "kv_connector: prefill p has a, decode d has b" {
		t.Fatalf("difference %q", d)
	}
}

func TestPairDifference(t *testing.T) {
	ep := func(id, addr string, facts map[string]string) *spec.Endpoint {
		return &spec.Endpoint{ID: id, Addr: netip.MustParseAddrPort(addr), PairFacts: facts}
	}
	nixl := map[string]string{spec.FactKVConnector: "NixlConnector"}
	proto := map[string]string{spec.FactPairingProtocol: "nixl-v1"}
	tests := []struct {
		name   string
		p, d   *spec.Endpoint
		strict bool
		want   string // "" pairs; else a substring of the difference
		also   string // a second difference that must be named too
	}{
		{"lenient, nothing stated", ep("p", "10.0.0.1:80", nil), ep("d", "10.0.0.2:80", nil), false, "", ""},
		{"lenient, one side states", ep("p", "10.0.0.1:80", nixl), ep("d", "10.0.0.2:80", nil), false, "", ""},
		{"same facts", ep("p", "10.0.0.1:80", nixl), ep("d", "10.0.0.2:80", map[string]string{spec.FactKVConnector: "NixlConnector"}), true, "", ""},
		{"strict, connector on one, protocol on other", ep("p", "10.0.0.1:80", nixl), ep("d", "10.0.0.2:80", proto), true, "", ""},
		{"strict, decode states nothing", ep("p", "10.0.0.1:80", nixl), ep("d", "10.0.0.2:80", map[string]string{spec.FactBlockSize: "16"}), true,
			"pd_pairing_mode strict: decode d declares no pairing_protocol or kv_connector", ""},
		{"strict, both state nothing", ep("p", "10.0.0.1:80", nil), ep("d", "10.0.0.2:80", nil), true,
			"prefill p declares no", "decode d declares no"},
		{"all differing facts named", ep("p", "10.0.0.1:80", map[string]string{spec.FactBlockSize: "16", spec.FactKVCacheDtype: "fp8"}),
			ep("d", "10.0.0.2:80", map[string]string{spec.FactBlockSize: "32", spec.FactKVCacheDtype: "auto"}), false,
			"block_size: prefill p has 16, decode d has 32", "kv_cache_dtype: prefill p has fp8, decode d has auto"},
		{"loopback prefill, remote decode", ep("p", "127.0.0.1:80", nil), ep("d", "10.0.0.2:80", nil), false,
			"transfer address: prefill p is loopback, decode d is not loopback", ""},
		{"remote prefill, loopback decode", ep("p", "10.0.0.1:80", nil), ep("d", "[::1]:80", nil), false,
			"prefill p is not loopback, decode d is loopback", ""},
		{"both loopback", ep("p", "127.0.0.2:80", nil), ep("d", "127.0.0.3:80", nil), false, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := pairDifference(tc.p, tc.d, tc.strict)
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) || !strings.Contains(got, tc.also) {
				t.Fatalf("pairDifference = %q, want %q and %q", got, tc.want, tc.also)
			}
		})
	}
}

// TestPDStrictPairing: in strict mode a decode that declares no transfer
// protocol cannot pair; the rule reports not ready naming why, requests get
// 503 no_compatible_pd_pair and no engine sees a leg; each endpoint's
// pairing key is in the status.
func TestPDStrictPairing(t *testing.T) {
	f := newPDFleet(t, pdTestOptions(), spec.EngineVLLM, 1, 1, func(r *spec.Rule) {
		r.PD.PairingStrict = true
		r.Endpoints[0].PairFacts = map[string]string{spec.FactKVConnector: "NixlConnector", spec.FactBlockSize: "16"}
	})
	st, _ := f.rt.Status(f.rule.Key)
	if st.Ready || !strings.Contains(st.Reason, "no compatible prefill/decode pair") || !strings.Contains(st.Reason, "declares no pairing_protocol or kv_connector") {
		t.Fatalf("status ready=%v reason %q, want not ready naming the strict mode", st.Ready, st.Reason)
	}
	p := f.rule.Endpoints[0].ID
	if k := st.Endpoints[p].PairingKey; k != "block_size=16,kv_connector=NixlConnector" {
		t.Fatalf("prefill pairing key %q", k)
	}
	res := post(t, testClient(), f.url(pathCompletions), pdBody(pathCompletions, false, ""))
	if res.status != http.StatusServiceUnavailable || !strings.Contains(res.body, CodeNoCompatiblePDPair) {
		t.Fatalf("got %d %s, want 503 %s", res.status, res.body, CodeNoCompatiblePDPair)
	}
	if pre, dec := f.legCounts(); pre[0] != 0 || dec[0] != 0 {
		t.Fatalf("legs sent to an unpairable rule: prefill %v decode %v", pre, dec)
	}

	// Declaring the decode's connector makes the pair, and the rule ready.
	r2 := *f.rule
	r2.Endpoints = append([]spec.Endpoint(nil), f.rule.Endpoints...)
	r2.Endpoints[1].PairFacts = map[string]string{spec.FactKVConnector: "NixlConnector"}
	if err := f.rt.Install(f.rule, &r2); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "rule ready once paired", func() bool { st, _ := f.rt.Status(f.rule.Key); return st.Ready })
	if res := post(t, testClient(), f.url(pathCompletions), pdBody(pathCompletions, false, "")); res.status != http.StatusOK {
		t.Fatalf("paired rule answered %d %s", res.status, res.body)
	}
}

// TestWarnNoPairOncePerChange: an unpairable rule logs its difference once,
// not once per request, and again when the difference changes.
func TestWarnNoPairOncePerChange(t *testing.T) {
	log, hook := logtest.NewNullLogger()
	rt := &Runtime{log: log}
	c := &compiled{label: "r"}
	for _, d := range []string{"a", "a", "a", "b", "b", "a"} {
		rt.warnNoPair(c, d)
	}
	var got []string
	for _, e := range hook.AllEntries() {
		got = append(got, e.Data["difference"].(string))
	}
	if strings.Join(got, ",") != "a,b,a" {
		t.Fatalf("logged differences %v, want a,b,a", got)
	}
}

// TestPairableAlternates: failover alternates are only those that may pair
// with the pair's fixed leg, in their order.
func TestPairableAlternates(t *testing.T) {
	ep := func(id, ip, conn string, role spec.Role) spec.Endpoint {
		e := spec.Endpoint{ID: id, Addr: netip.AddrPortFrom(netip.MustParseAddr(ip), 8000), Role: role}
		if conn != "" {
			e.PairFacts = map[string]string{spec.FactKVConnector: conn}
		}
		return e
	}
	c := &compiled{rule: &spec.Rule{Endpoints: []spec.Endpoint{
		ep("p0", "10.0.0.1", "MoRIIOConnector", spec.RolePrefill),
		ep("d0", "10.0.0.2", "MoRIIOConnector", spec.RoleDecode),
	}}}
	alts := []spec.Endpoint{
		ep("x-nixl", "10.0.0.3", "NixlConnector", spec.RoleDecode),
		ep("x-mori", "10.0.0.4", "MoRIIOConnector", spec.RoleDecode),
		ep("x-none", "10.0.0.5", "", spec.RoleDecode),
		ep("x-loop", "127.0.0.1", "MoRIIOConnector", spec.RoleDecode),
	}
	ids := func(eps []spec.Endpoint) string {
		var s []string
		for _, e := range eps {
			s = append(s, e.ID)
		}
		return strings.Join(s, ",")
	}
	if got := ids(c.pairable(append([]spec.Endpoint(nil), alts...), 0, spec.RoleDecode)); got != "x-mori,x-none" {
		t.Errorf("decode alternates %s, want x-mori,x-none", got)
	}
	if got := ids(c.pairable(append([]spec.Endpoint(nil), alts...), 1, spec.RolePrefill)); got != "x-mori,x-none" {
		t.Errorf("prefill alternates %s, want x-mori,x-none", got)
	}
}
