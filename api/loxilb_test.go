package api_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/infergate/infergate/rules"
	"github.com/infergate/infergate/spec"
)

func loxiFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "rules", "testdata", "loxilb", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// LoxiLB's bodies (loxicmd's create, a LoxiLB GET dump, an Octavia body)
// are accepted unchanged, and a GET of ours re-POSTs unchanged: LoxiLB's
// identical-re-POST answer (409 rule_exists), nothing changed.
func TestLoxiLBBodiesAndRoundTrip(t *testing.T) {
	for _, name := range []string{"loxicmd_create_lb.json", "loxilb_get_dump.json", "octavia_full.json"} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, true, nil)
			mustCreate(t, h, loxiFixture(t, name))
			res := h.do(t, http.MethodGet, lb+"/all", nil)
			var list rules.RuleList
			if res.status != 200 || json.Unmarshal(res.body, &list) != nil || len(list.LbAttr) != 1 {
				t.Fatalf("GET all: %d %s", res.status, res.body)
			}
			got := list.LbAttr[0]
			if got.ServiceArguments.AdminStateUp == nil || got.ServiceArguments.BackendProtocol != "http1" ||
				got.ServiceArguments.InactiveTimeOut == 0 {
				t.Errorf("GET lacks LoxiLB's always-present fields: %s", res.body)
			}
			for i := 1; i < len(got.Endpoints); i++ {
				if rules.SortEndpointsLoxiLB(got.Endpoints[i-1 : i+1]); got.Endpoints[i-1].EndpointIP > got.Endpoints[i].EndpointIP {
					t.Errorf("endpoints not in LoxiLB order: %s", res.body)
				}
			}
			one, err := json.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			checkError(t, h.do(t, http.MethodPost, lb, one), http.StatusConflict, "rule_exists", "")
		})
	}
}

// adminStateUp, annotations, secondaryVIPs and endpoint probe fields are
// stored and returned as given.
func TestLoxiLBFieldsReturned(t *testing.T) {
	h := newHarness(t, true, nil)
	mustCreate(t, h, loxiFixture(t, "octavia_full.json"))
	res := h.do(t, http.MethodGet, lb+"/externalipaddress/192.0.2.30/port/9000/protocol/tcp", nil)
	var r rules.Rule
	if res.status != 200 || json.Unmarshal(res.body, &r) != nil {
		t.Fatalf("GET: %d %s", res.status, res.body)
	}
	sa := r.ServiceArguments
	if sa.AdminStateUp == nil || *sa.AdminStateUp || sa.Annotations["octaviaProtocol"] != "HTTP" || len(sa.Annotations) != 2 {
		t.Errorf("service arguments: %s", res.body)
	}
	if len(r.SecondaryVIPs) != 1 || r.SecondaryVIPs[0].PortID != "p-9" {
		t.Errorf("secondaryVIPs: %s", res.body)
	}
	if ep := r.Endpoints[0]; ep.HTTPMethod != "HEAD" || ep.URLPath != "/ready" || ep.ExpectedCodes != "200,202" {
		t.Errorf("endpoint probe fields: %+v", ep)
	}
}

// Bad LoxiLB input is a 400 (409 for collisions) naming the field, and
// nothing is stored.
func TestLoxiLBBadInput(t *testing.T) {
	h := newHarness(t, true, nil)
	mustCreate(t, h, ruleBody(t, func(sa map[string]any) { sa["externalIP"] = "10.0.0.1"; sa["port"] = 8080 }))
	withSecondary := func(addr string, port int) []byte {
		var m map[string]any
		_ = json.Unmarshal(ruleBody(t, func(sa map[string]any) { sa["externalIP"] = "10.0.0.9"; sa["port"] = port }), &m)
		m["secondaryVIPs"] = []map[string]any{{"address": addr}}
		b, _ := json.Marshal(m)
		return b
	}
	tests := []struct {
		name   string
		body   []byte
		status int
		code   string
		field  string
	}{
		{"mixed-case duplicate", []byte(`{"serviceArguments":{"externalIP":"10.0.0.2","port":80,"protocol":"tcp","mode":4,"monitor":true,"MONITOR":true},` +
			`"endpoints":[{"endpointIP":"10.1.0.1","targetPort":80,"weight":1}]}`), 400, "malformed_json", "serviceArguments.monitor"},
		{"adminStateUp wrong type", ruleBody(t, func(sa map[string]any) { sa["adminStateUp"] = "no" }), 400, "malformed_json", "serviceArguments.adminStateUp"},
		{"secondary VIP collides", withSecondary("10.0.0.1", 8080), 409, "vip_conflict", "secondaryVIPs[0].address"},
		{"secondary VIP not an IP", withSecondary("vip", 8080), 400, "invalid_field", "secondaryVIPs[0].address"},
		{"annotation too long", ruleBody(t, func(sa map[string]any) {
			v := make([]byte, 257)
			for i := range v {
				v[i] = 'a'
			}
			sa["annotations"] = map[string]string{"k": string(v)}
		}), 400, "invalid_field", "serviceArguments.annotations.k"},
		{"unsupported LoxiLB field", ruleBody(t, func(sa map[string]any) { sa["timeoutMemberConnect"] = 5000 }), 400, "unsupported", "serviceArguments.timeoutMemberConnect"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkError(t, h.do(t, http.MethodPost, lb, tc.body), tc.status, tc.code, tc.field)
			if n := len(h.store.List()); n != 1 {
				t.Fatalf("rejected POST changed the store: %d rules", n)
			}
		})
	}
	// The same secondary VIP on another port does not collide.
	mustCreate(t, h, withSecondary("10.0.0.1", 8081))
}

// Endpoint state reads LoxiLB's words; counter is requests:bytes.
func TestLoxiLBEndpointState(t *testing.T) {
	st := fakeStatus{}
	h := newHarness(t, true, st)
	mustCreate(t, h, ruleBody(t, func(sa map[string]any) { sa["externalIP"] = "10.0.0.1"; sa["port"] = 8080 }))
	e := h.store.List()[0]
	ids := []string{e.Compiled.Endpoints[0].ID}
	st[e.Compiled.Key] = spec.RuleStatus{Endpoints: map[string]spec.EndpointStatus{
		ids[0]: {State: "active", Breaker: "open", Requests: 7, Bytes: 1234},
	}}
	res := h.do(t, http.MethodGet, lb+"/all", nil)
	var list rules.RuleList
	if json.Unmarshal(res.body, &list) != nil {
		t.Fatal(string(res.body))
	}
	for _, ep := range list.LbAttr[0].Endpoints {
		if ep.EndpointIP+":"+itoa(ep.TargetPort) == ids[0] {
			if ep.State != "inactive" || ep.Health != "breaker-open" || ep.Counter != "7:1234" {
				t.Errorf("endpoint %+v, want inactive / breaker-open / 7:1234", ep)
			}
		}
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// loxicmdList mirrors the shape (JSON names and Go types) loxicmd decodes
// GET /config/loadbalancer/all into for `get lb`, `-o wide` and `-o json`.
// encoding/json errors on a type mismatch, so this proves loxicmd can read
// our answer and finds its columns filled.
type loxicmdList struct {
	LbAttr []struct {
		Service struct {
			ExternalIP string `json:"externalIP"`
			Port       uint16 `json:"port"`
			PortMax    uint16 `json:"portMax"`
			Protocol   string `json:"protocol"`
			Sel        uint   `json:"sel"`
			Mode       int32  `json:"mode"`
			BGP        bool   `json:"BGP"`
			Monitor    bool   `json:"Monitor"`
			Timeout    uint32 `json:"inactiveTimeOut"`
			Block      uint32 `json:"block"`
			Name       string `json:"name"`
			Security   int32  `json:"security"`
			Host       string `json:"host"`
			PpV2       bool   `json:"proxyprotocolv2"`
		} `json:"serviceArguments"`
		SecondaryIPs []struct {
			SecondaryIP string `json:"secondaryIP"`
		} `json:"secondaryIPs"`
		Endpoints []struct {
			EndpointIP string `json:"endpointIP"`
			TargetPort uint16 `json:"targetPort"`
			Weight     uint8  `json:"weight"`
			State      string `json:"state"`
			Counter    string `json:"counter"`
			EpRole     int32  `json:"ep_role"`
			NixlPort   int32  `json:"nixl_port"`
		} `json:"endpoints"`
	} `json:"lbAttr"`
}

func TestLoxicmdReadsOurGET(t *testing.T) {
	st := fakeStatus{}
	h := newHarness(t, true, st)
	mustCreate(t, h, loxiFixture(t, "loxicmd_create_lb.json"))
	e := h.store.List()[0]
	st[e.Compiled.Key] = spec.RuleStatus{Endpoints: map[string]spec.EndpointStatus{
		e.Compiled.Endpoints[0].ID: {State: "active", Breaker: "closed", Requests: 3, Bytes: 900},
		e.Compiled.Endpoints[1].ID: {State: "down", Breaker: "closed"},
	}}
	res := h.do(t, http.MethodGet, lb+"/all", nil)
	var got loxicmdList
	if err := json.Unmarshal(res.body, &got); err != nil {
		t.Fatalf("loxicmd cannot decode our GET: %v\n%s", err, res.body)
	}
	svc := got.LbAttr[0].Service
	if svc.ExternalIP != "192.0.2.12" || svc.Port != 2020 || svc.Mode != 4 || svc.Timeout != 240 {
		t.Errorf("loxicmd's columns: %+v", svc)
	}
	eps := got.LbAttr[0].Endpoints
	if len(eps) != 2 || eps[0].EndpointIP != "203.0.113.1" || eps[0].State != "active" || eps[0].Counter != "3:900" ||
		eps[1].State != "inactive" || eps[1].Counter != "0:0" || eps[0].EpRole != 1 || eps[1].NixlPort != 9002 {
		t.Errorf("loxicmd's endpoint columns: %+v", eps)
	}
}
