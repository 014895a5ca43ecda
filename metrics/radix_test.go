package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestRadixExposition is the golden test of the prefix-affinity families.
func TestRadixExposition(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := NewRadix(reg)
	r.TrackIndex("r1", func() IndexStats { return IndexStats{Entries: 32, SizeBytes: 2112, Evictions: 5} })
	r.MatchRate.WithLabelValues("r1").Observe(0.25)
	r.CHWBLPicks.WithLabelValues("r2", "prefix").Add(3)
	r.CHWBLBoundSkips.WithLabelValues("r2").Inc()

	got := gather(t, reg)
	for _, w := range []string{
		"# TYPE loxilb_pd_trie_nodes gauge",
		`loxilb_pd_trie_nodes{rule="r1"} 32`,
		"# TYPE loxilb_pd_trie_bytes gauge",
		`loxilb_pd_trie_bytes{rule="r1"} 2112`,
		"# TYPE loxilb_pd_trie_evictions_total counter",
		`loxilb_pd_trie_evictions_total{rule="r1"} 5`,
		"# TYPE loxilb_pd_trie_match_rate histogram",
		`loxilb_pd_trie_match_rate_bucket{rule="r1",le="0.2"} 0`,
		`loxilb_pd_trie_match_rate_bucket{rule="r1",le="0.3"} 1`,
		"# TYPE infergate_chwbl_picks_total counter",
		`infergate_chwbl_picks_total{rule="r2",source="prefix"} 3`,
		`infergate_chwbl_bound_skips_total{rule="r2"} 1`,
	} {
		if !strings.Contains(got, w+"\n") {
			t.Errorf("exposition lacks %q\n--- got:\n%s", w, got)
		}
	}

	r.ForgetRule("r1")
	r.ForgetRule("r2")
	if got := gather(t, reg); strings.Contains(got, `rule="r1"`) || strings.Contains(got, `rule="r2"`) {
		t.Errorf("series survived ForgetRule:\n%s", got)
	}
}
