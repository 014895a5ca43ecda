package api_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/infergate/infergate/api"
	"github.com/infergate/infergate/spec"
)

// pdRuleBody is a vLLM P/D rule on VIP ip.
func pdRuleBody(t *testing.T, ip, name string) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"serviceArguments": map[string]any{"externalIP": ip, "port": 8080, "protocol": "tcp", "mode": 4, "name": name, "pd_disagg_mode": true},
		"endpoints": []map[string]any{
			{"endpointIP": "10.1.0.1", "targetPort": 8000, "weight": 1, "ep_role": 1, "kv_connector": "NixlConnector"},
			{"endpointIP": "10.1.0.2", "targetPort": 8000, "weight": 1, "ep_role": 2},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestReadyzPD: 200 while every P/D rule has a usable pair, 503 when one
// has none (single-pool rules do not count); anonymous, naming no rule;
// pairing keys reach …/status.
func TestReadyzPD(t *testing.T) {
	status := fakeStatus{}
	h := newHarness(t, true, status)
	mustCreate(t, h, ruleBody(t, nil)) // single pool, no runtime status: not counted
	mustCreate(t, h, pdRuleBody(t, "10.0.0.2", "pd-a"))
	mustCreate(t, h, pdRuleBody(t, "10.0.0.3", "pd-b"))
	keys := make([]spec.Key, 2)
	for _, e := range h.store.List() {
		switch e.Rule.ServiceArguments.ExternalIP {
		case "10.0.0.2":
			keys[0] = e.Compiled.Key
		case "10.0.0.3":
			keys[1] = e.Compiled.Key
		}
	}
	get := func() (int, api.PDReadinessView) {
		r := h.do(t, http.MethodGet, "/readyz/pd", nil)
		var v api.PDReadinessView
		if err := json.Unmarshal(r.body, &v); err != nil {
			t.Fatalf("%d %s: %v", r.status, r.body, err)
		}
		return r.status, v
	}
	status[keys[0]] = spec.RuleStatus{Ready: true, Endpoints: map[string]spec.EndpointStatus{
		"10.1.0.1:8000": {State: "active", Breaker: "closed", PairingKey: "kv_connector=NixlConnector",
			BootstrapPort: 8999, Labels: map[string]string{"zone": "a"}}}}
	status[keys[1]] = spec.RuleStatus{Ready: false, Reason: "no compatible prefill/decode pair among the usable endpoints: …"}
	if code, v := get(); code != http.StatusServiceUnavailable || v.Status != "not ready" || v.PDRules != 2 || v.Unpaired != 1 {
		t.Fatalf("one unpaired rule: %d %+v, want 503 with 1 of 2 unpaired", code, v)
	}
	status[keys[1]] = spec.RuleStatus{Ready: true}
	if code, v := get(); code != http.StatusOK || v.Status != "ready" || v.PDRules != 2 || v.Unpaired != 0 {
		t.Fatalf("all paired: %d %+v, want 200", code, v)
	}

	r := h.do(t, http.MethodGet, "/netlox/v1/config/loadbalancer/externalipaddress/10.0.0.2/port/8080/protocol/tcp/status", nil)
	var sv api.StatusView
	if r.status != http.StatusOK || json.Unmarshal(r.body, &sv) != nil {
		t.Fatalf("status: %d %s", r.status, r.body)
	}
	if k := sv.Endpoints["10.1.0.1:8000"].PairingKey; k != "kv_connector=NixlConnector" {
		t.Fatalf("status pairing_key = %q: %s", k, r.body)
	}
	// An endpoint's own bootstrap port and labels (a registered one's come
	// from its registration) are shown with it.
	if ev := sv.Endpoints["10.1.0.1:8000"]; ev.BootstrapPort != 8999 || ev.Labels["zone"] != "a" {
		t.Fatalf("status lacks the endpoint's bootstrap_port and labels: %s", r.body)
	}
}
