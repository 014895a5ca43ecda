package metrics

import (
	"sort"
	"strings"
	"testing"
)

// TestPDFamilies pins the P/D family names and types (dashboards and the
// LoxiLB CICD greps key on them) and that New registers them without
// colliding with other areas.
func TestPDFamilies(t *testing.T) {
	m := New()
	p := m.PD
	p.Requests.WithLabelValues("r", "m", "complete", "success").Inc()
	p.RoomRetries.WithLabelValues("r").Inc()
	p.TRTEarlyExits.WithLabelValues("r").Inc()
	p.KVTransferFailures.WithLabelValues("r").Inc()
	p.PrefillDeaths.WithLabelValues("r").Inc()
	p.DecodeDeaths.WithLabelValues("r").Inc()
	p.Failovers.WithLabelValues("r").Inc()
	p.PrefillDuration.WithLabelValues("r").Observe(0.01)
	p.DecodeTTFB.WithLabelValues("r").Observe(0.01)
	p.Duration.WithLabelValues("r").Observe(0.01)
	p.LegRequests.WithLabelValues("r", "e", "prefill", "200").Inc()
	p.LadderDecisions.WithLabelValues("r", "tier0_session", "hit", "").Inc()
	p.SessionHits.WithLabelValues("r").Inc()
	p.FallbackToNormal.WithLabelValues("r").Inc()
	p.ClientTransferState.WithLabelValues("r", "field_stripped").Inc()
	p.DecodeFailovers.WithLabelValues("r").Inc()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range fams {
		n := f.GetName()
		if strings.HasPrefix(n, "loxilb_ai_pd_") || strings.HasPrefix(n, "loxilb_pd_sg_") || strings.HasPrefix(n, "loxilb_pd_trt_") ||
			n == "loxilb_pd_kv_transfer_failure_total" || n == "loxilb_pd_prefill_ep_died_total" ||
			n == "loxilb_pd_decode_ep_died_total" || n == "loxilb_pd_connect_failover_total" ||
			n == "loxilb_pd_fallback_to_normal_total" || strings.HasPrefix(n, "infergate_pd_") || strings.HasPrefix(n, "infergate_ladder_") {
			got = append(got, n+" "+f.GetType().String())
		}
	}
	sort.Strings(got)
	want := []string{
		"infergate_ladder_decisions_total COUNTER",
		"infergate_pd_client_transfer_state_total COUNTER",
		"infergate_pd_decode_failovers_total COUNTER",
		"infergate_pd_leg_requests_total COUNTER",
		"loxilb_ai_pd_decode_ttfb_seconds HISTOGRAM",
		"loxilb_ai_pd_prefill_duration_seconds HISTOGRAM",
		"loxilb_ai_pd_request_duration_seconds HISTOGRAM",
		"loxilb_ai_pd_requests_total COUNTER",
		"loxilb_ai_pd_session_hits_total COUNTER",
		"loxilb_pd_connect_failover_total COUNTER",
		"loxilb_pd_decode_ep_died_total COUNTER",
		"loxilb_pd_fallback_to_normal_total COUNTER",
		"loxilb_pd_kv_transfer_failure_total COUNTER",
		"loxilb_pd_prefill_ep_died_total COUNTER",
		"loxilb_pd_sg_room_retry_total COUNTER",
		"loxilb_pd_trt_ctx_early_exit_total COUNTER",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("P/D families\n got: %v\nwant: %v", got, want)
	}
}
