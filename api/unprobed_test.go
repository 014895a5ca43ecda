package api_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/infergate/infergate/api"
	"github.com/infergate/infergate/rules"
	"github.com/infergate/infergate/spec"
)

// TestUnprobedEndpoints: an endpoint no probe watches reads health
// "unprobed" in GET and state "unprobed" in /status instead of "active";
// LoxiLB's state word stays "active", and facts the datapath observed
// (down, breaker-open) are kept.
func TestUnprobedEndpoints(t *testing.T) {
	tests := []struct {
		name       string
		probe      func(sa map[string]any)
		dp         spec.EndpointStatus // datapath's view of 10.1.0.1:8000
		wantState  string              // GET state (LoxiLB's word)
		wantHealth string              // GET health
		wantStatus string              // /status state
	}{
		{"no probe, up", nil, spec.EndpointStatus{State: "active", Breaker: "closed"}, "active", "unprobed", "unprobed"},
		{"no probe, breaker open", nil, spec.EndpointStatus{State: "active", Breaker: "open"}, "inactive", "breaker-open", "unprobed"},
		{"no probe, draining", nil, spec.EndpointStatus{State: "draining", Breaker: "closed"}, "inactive", "draining", "draining"},
		{"probetype none", func(sa map[string]any) { sa["probetype"] = "none" }, spec.EndpointStatus{State: "active"}, "active", "unprobed", "unprobed"},
		{"monitor (tcp probe)", func(sa map[string]any) { sa["monitor"] = true }, spec.EndpointStatus{State: "active"}, "active", "active", "active"},
		{"http probe", func(sa map[string]any) { sa["probetype"] = "http" }, spec.EndpointStatus{State: "active"}, "active", "active", "active"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status := fakeStatus{}
			h := newHarness(t, true, status)
			mustCreate(t, h, ruleBody(t, tc.probe))
			e := h.store.List()[0]
			status[e.Compiled.Key] = spec.RuleStatus{Ready: true, Endpoints: map[string]spec.EndpointStatus{"10.1.0.1:8000": tc.dp}}

			var got rules.Rule
			r := h.do(t, http.MethodGet, lb+"/externalipaddress/10.0.0.1/port/8080/protocol/tcp", nil)
			if r.status != 200 || json.Unmarshal(r.body, &got) != nil {
				t.Fatalf("GET: %d %s", r.status, r.body)
			}
			ep := got.Endpoints[0]
			if ep.EndpointIP != "10.1.0.1" || ep.State != tc.wantState || ep.Health != tc.wantHealth {
				t.Errorf("GET endpoint %s state/health = %s/%s, want %s/%s", ep.EndpointIP, ep.State, ep.Health, tc.wantState, tc.wantHealth)
			}
			var st api.StatusView
			r = h.do(t, http.MethodGet, lb+"/externalipaddress/10.0.0.1/port/8080/protocol/tcp/status", nil)
			if r.status != 200 || json.Unmarshal(r.body, &st) != nil {
				t.Fatalf("status: %d %s", r.status, r.body)
			}
			if s := st.Endpoints["10.1.0.1:8000"].State; s != tc.wantStatus {
				t.Errorf("/status state = %s, want %s", s, tc.wantStatus)
			}
		})
	}
}
