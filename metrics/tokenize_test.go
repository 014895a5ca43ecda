package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestKVRoutingExposition is the golden test of the KV routing families:
// names, types and labels are a contract with the shipped dashboard and
// alert rules (tier15 hit ratio, zero-hit watchdog).
func TestKVRoutingExposition(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := NewKVRouting(reg)
	r.Tier15Hits.WithLabelValues("r1").Add(2)
	r.Tier15Misses.WithLabelValues("r1", "untrusted").Inc()
	r.Tier15Pending.WithLabelValues("r1").Inc()
	r.ZeroHitWatchdog.WithLabelValues("r1").Inc()
	r.TokenizeCache.WithLabelValues("r1", ResultHit).Add(3)
	r.TokenizeDuration.WithLabelValues("r1", ResultOK).Observe(0.002)
	r.TRTPolls.WithLabelValues("r1", "10.0.0.1:8000", ResultOK).Inc()

	got := gather(t, reg)
	for _, w := range []string{
		"# TYPE loxilb_pd_kv_tier15_hits_total counter",
		`loxilb_pd_kv_tier15_hits_total{rule="r1"} 2`,
		"# TYPE loxilb_pd_kv_tier15_misses_total counter",
		`loxilb_pd_kv_tier15_misses_total{reason="untrusted",rule="r1"} 1`,
		"# TYPE loxilb_pd_kv_tier15_pending_hits_total counter",
		`loxilb_pd_kv_tier15_pending_hits_total{rule="r1"} 1`,
		"# TYPE loxilb_pd_kv_zero_hit_watchdog_total counter",
		`loxilb_pd_kv_zero_hit_watchdog_total{rule="r1"} 1`,
		"# TYPE loxilb_pd_kv_tokenize_cache_total counter",
		`loxilb_pd_kv_tokenize_cache_total{result="hit",rule="r1"} 3`,
		"# TYPE loxilb_pd_kv_tokenize_duration_seconds histogram",
		`loxilb_pd_kv_tokenize_duration_seconds_count{result="ok",rule="r1"} 1`,
		"# TYPE loxilb_pd_kv_trt_polls_total counter",
		`loxilb_pd_kv_trt_polls_total{endpoint="10.0.0.1:8000",result="ok",rule="r1"} 1`,
	} {
		if !strings.Contains(got, w+"\n") {
			t.Errorf("exposition lacks %q\n--- got:\n%s", w, got)
		}
	}

	r.ForgetRule("r1")
	if got := gather(t, reg); strings.Contains(got, `rule="r1"`) {
		t.Errorf("series of a removed rule survived ForgetRule:\n%s", got)
	}
}
