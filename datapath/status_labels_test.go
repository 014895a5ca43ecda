package datapath

import (
	"testing"

	"github.com/infergate/infergate/spec"
)

// TestStatusShowsEndpointLabels: an endpoint's own bootstrap port and
// labels are in the rule's status (an endpointSelector rule's endpoints are
// shown nowhere else, so a registration's are seen here).
func TestStatusShowsEndpointLabels(t *testing.T) {
	f := newPDFleet(t, pdTestOptions(), spec.EngineVLLM, 1, 1, func(r *spec.Rule) {
		r.Endpoints[0].BootstrapPort, r.Endpoints[0].Labels = 8999, map[string]string{"zone": "a"}
	})
	st, _ := f.rt.Status(f.rule.Key)
	p, d := st.Endpoints[f.rule.Endpoints[0].ID], st.Endpoints[f.rule.Endpoints[1].ID]
	if p.BootstrapPort != 8999 || p.Labels["zone"] != "a" {
		t.Errorf("prefill status bootstrap_port %d labels %v, want 8999 and zone=a", p.BootstrapPort, p.Labels)
	}
	if d.BootstrapPort != 0 || d.Labels != nil {
		t.Errorf("decode status bootstrap_port %d labels %v, want none", d.BootstrapPort, d.Labels)
	}
}
