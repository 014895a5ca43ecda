package kvplane

import (
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/infergate/infergate/datapath/pick"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/spec"
)

// TestRulesPoolTheirOwnEndpoints: a rule prices an endpoint that has not
// answered yet at the pool of its own endpoints, never at one that mixes
// in another rule's engines (an 8B pool beside a 70B pool) or the pods a
// rollout replaced. Answers are noiseless cold 1,700-token prefills at a
// per-token time of factor × the prior, learned through the rule that
// placed them.
func TestRulesPoolTheirOwnEndpoints(t *testing.T) {
	type learn struct {
		rule   int // index into the installs
		ids    []string
		factor float64 // per-token time over the prior
	}
	for _, tc := range []struct {
		name string
		// installs are applied in order; an entry with the same name as an
		// earlier one updates it (a rollout).
		installs []*spec.Rule
		learned  []learn
		// fresh is priced through installs[rule] and must come within 10 %
		// of factor × the prior.
		fresh       string
		rule        int
		wantFactor  float64
		againstPool float64 // the one-pool median's factor, for the message
	}{
		{"an 8B rule and a 70B rule",
			[]*spec.Rule{
				scopeRule("8b", 81, "10.1.0.1", "10.1.0.2", "10.1.0.3"),
				scopeRule("70b", 82, "10.2.0.1", "10.2.0.2", "10.2.0.3", "10.2.0.4"),
			},
			[]learn{{0, []string{"10.1.0.1:8000", "10.1.0.2:8000", "10.1.0.3:8000"}, 0.6}, {1, []string{"10.2.0.1:8000", "10.2.0.2:8000", "10.2.0.3:8000"}, 1.8}},
			"10.2.0.4:8000", 1, 1.8, 1.2},
		{"a rollout replaces every pod",
			[]*spec.Rule{
				scopeRule("r", 81, "10.3.0.1", "10.3.0.2", "10.3.0.3"),
				scopeRule("r", 81, "10.4.0.1", "10.4.0.2", "10.4.0.3", "10.4.0.4"),
			},
			[]learn{{0, []string{"10.3.0.1:8000", "10.3.0.2:8000", "10.3.0.3:8000"}, 1.8}, {1, []string{"10.4.0.1:8000", "10.4.0.2:8000", "10.4.0.3:8000"}, 0.6}},
			"10.4.0.4:8000", 1, 0.6, 1.2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			p := New(rec.opts(), metrics.NewKV(prometheus.NewRegistry()), nil)
			defer p.Close()
			views := make([]*RuleKV, len(tc.installs))
			byName := map[string]*spec.Rule{}
			for i, r := range tc.installs {
				rk, err := p.Install(byName[r.Name], r)
				if err != nil {
					t.Fatal(err)
				}
				byName[r.Name], views[i] = r, rk
				for _, l := range tc.learned {
					if l.rule != i {
						continue
					}
					costs := rk.Costs()
					prior := float64(costs.Model().PerToken)
					for range 40 {
						for _, id := range l.ids {
							costs.Observe(id, pick.Estimate{Uncached: 1700, Slowdown: 1}, pick.DefaultCostOverhead+time.Duration(1700*prior*l.factor))
						}
					}
				}
			}
			costs := views[tc.rule].Costs()
			prior := float64(costs.Model().PerToken)
			got := float64(costs.ModelFor(tc.fresh).PerToken) / prior
			if got < 0.9*tc.wantFactor || got > 1.1*tc.wantFactor {
				t.Errorf("%s priced at %.2f× the prior, want %.2f× (its rule's pool; one pool across rules gives about %.2f×)", tc.fresh, got, tc.wantFactor, tc.againstPool)
			}
		})
	}
}

// scopeRule is a mode-3 rule named name on port port over the endpoints
// ip:8000.
func scopeRule(name string, port uint16, ips ...string) *spec.Rule {
	eps := make([]spec.Endpoint, len(ips))
	for i, ip := range ips {
		eps[i] = ep(ip, spec.RoleAny)
	}
	return &spec.Rule{
		Key:       spec.Key{VIP: netip.MustParseAddr("10.0.0.100"), Port: port, Protocol: "tcp"},
		Name:      name,
		Engine:    spec.EngineVLLM,
		KV:        &spec.KV{Mode: 3},
		Endpoints: eps,
	}
}
