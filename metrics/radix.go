package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Radix covers Tier-1 prefix affinity (the radix index of P/D rules) and
// single-pool consistent hashing with bounded loads (sel 8/10). Label "rule"
// is the rule name, "source" the CHWBL routing key kind (prefix, session,
// round_robin).
type Radix struct {
	// MatchRate is observed by the ladder on every Tier-1 lookup: matched
	// bytes over key bytes, 0 on a miss.
	MatchRate *prometheus.HistogramVec // loxilb_pd_trie_match_rate{rule}
	// CHWBLPicks counts sel 8/10 decisions by routing key kind.
	CHWBLPicks *prometheus.CounterVec // infergate_chwbl_picks_total{rule,source}
	// CHWBLBoundSkips counts members passed over for being above the load
	// bound (chwbl.Ring.PickDetail's skipped).
	CHWBLBoundSkips *prometheus.CounterVec // infergate_chwbl_bound_skips_total{rule}

	index *indexCollector // loxilb_pd_trie_nodes, loxilb_pd_trie_bytes, loxilb_pd_trie_evictions_total
}

// IndexStats is what an index reports at scrape time (radix.Index.Stats
// maps onto it field by field).
type IndexStats struct {
	Entries   int
	SizeBytes int64
	Evictions uint64
}

// NewRadix builds the prefix-affinity metric set and registers it on reg.
func NewRadix(reg prometheus.Registerer) *Radix {
	r := &Radix{
		MatchRate: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "loxilb_pd_trie_match_rate",
			Help:    "Tier-1 prefix match rate per lookup: matched bytes over prompt-key bytes (0 on a miss).",
			Buckets: []float64{0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1},
		}, []string{"rule"}),
		CHWBLPicks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_chwbl_picks_total",
			Help: "Consistent-hash (sel 8/10) endpoint picks by routing key source.",
		}, []string{"rule", "source"}),
		CHWBLBoundSkips: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_chwbl_bound_skips_total",
			Help: "Endpoints passed over by consistent hashing because their load was above the bound.",
		}, []string{"rule"}),
		index: &indexCollector{
			nodes: prometheus.NewDesc("loxilb_pd_trie_nodes",
				"Prefixes stored in the rule's Tier-1 prefix index.", []string{"rule"}, nil),
			bytes: prometheus.NewDesc("loxilb_pd_trie_bytes",
				"Accounted memory of the rule's Tier-1 prefix index (bounded by its budget).", []string{"rule"}, nil),
			evictions: prometheus.NewDesc("loxilb_pd_trie_evictions_total",
				"Prefixes evicted from the rule's Tier-1 prefix index to stay within its byte budget.", []string{"rule"}, nil),
			sources: map[string]func() IndexStats{},
		},
	}
	reg.MustRegister(r.MatchRate, r.CHWBLPicks, r.CHWBLBoundSkips, r.index)
	return r
}

// TrackIndex makes the index gauges of rule read stats at every scrape, so
// nothing on the request path sets them. A later call for the same rule
// (rule updated, new index) replaces the source.
func (r *Radix) TrackIndex(rule string, stats func() IndexStats) {
	r.index.mu.Lock()
	defer r.index.mu.Unlock()
	r.index.sources[rule] = stats
}

// ForgetRule drops every series of a deleted rule.
func (r *Radix) ForgetRule(rule string) {
	r.index.mu.Lock()
	delete(r.index.sources, rule)
	r.index.mu.Unlock()
	r.MatchRate.DeleteLabelValues(rule)
	r.CHWBLBoundSkips.DeleteLabelValues(rule)
	r.CHWBLPicks.DeletePartialMatch(prometheus.Labels{"rule": rule})
}

// indexCollector reads each tracked index at scrape time.
type indexCollector struct {
	nodes, bytes, evictions *prometheus.Desc

	mu      sync.Mutex
	sources map[string]func() IndexStats
}

func (c *indexCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.nodes
	ch <- c.bytes
	ch <- c.evictions
}

func (c *indexCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for rule, stats := range c.sources {
		s := stats()
		ch <- prometheus.MustNewConstMetric(c.nodes, prometheus.GaugeValue, float64(s.Entries), rule)
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(s.SizeBytes), rule)
		ch <- prometheus.MustNewConstMetric(c.evictions, prometheus.CounterValue, float64(s.Evictions), rule)
	}
}
