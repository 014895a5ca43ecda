package datapath

import (
	"net/http"
	"testing"

	"github.com/infergate/infergate/spec"
)

// TestPDOutcomeSeriesRuleLabel: the P/D outcome families (pd.Record) carry
// the rule's metrics label as every other family does — its name, else its
// key — and are dropped with the rule. Rules created without a name (the
// LoxiLB API's usual case) were all counted under rule="" and never dropped.
func TestPDOutcomeSeriesRuleLabel(t *testing.T) {
	families := []string{
		"loxilb_ai_pd_requests_total",
		"loxilb_ai_pd_request_duration_seconds",
		"loxilb_ai_pd_prefill_duration_seconds",
		"infergate_pd_kv_connector_total",
	}
	for _, name := range []string{"", "pd-named"} {
		t.Run("name="+name, func(t *testing.T) {
			f := newPDFleet(t, pdTestOptions(), spec.EngineVLLM, 1, 1, func(r *spec.Rule) { r.Name = name })
			want := name
			if want == "" {
				want = f.rule.Key.String()
			}
			if res := post(t, testClient(), f.url(pathCompletions), pdBody(pathCompletions, false, "")); res.status != http.StatusOK {
				t.Fatalf("status %d: %s", res.status, res.body)
			}
			for _, fam := range families {
				waitCounter(t, f.reg, fam, map[string]string{"rule": want}, 1)
			}
			f.rt.Remove(f.rule)
			for _, fam := range families {
				if got := counterSum(t, f.reg, fam, nil); got != 0 {
					t.Errorf("%s after the rule was removed = %v, want no series", fam, got)
				}
			}
		})
	}
}
