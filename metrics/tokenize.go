package metrics

import "github.com/prometheus/client_golang/prometheus"

// KVRouting covers the request side of KV-exact routing: tokenisation
// through the engine's /tokenize, the Tier 1.5 decision and its zero-hit
// watchdog. It hangs off KV (KV.Routing) so the daemon's metric set needs no
// new field; label "rule" is the rule name.
type KVRouting struct {
	TokenizeDuration *prometheus.HistogramVec // loxilb_pd_kv_tokenize_duration_seconds{rule,result}
	TokenizeCache    *prometheus.CounterVec   // loxilb_pd_kv_tokenize_cache_total{rule,result}
	Tier15Hits       *prometheus.CounterVec   // loxilb_pd_kv_tier15_hits_total{rule}
	Tier15Misses     *prometheus.CounterVec   // loxilb_pd_kv_tier15_misses_total{rule,reason}
	Tier15Pending    *prometheus.CounterVec   // loxilb_pd_kv_tier15_pending_hits_total{rule}
	ZeroHitWatchdog  *prometheus.CounterVec   // loxilb_pd_kv_zero_hit_watchdog_total{rule}
	TRTPolls         *prometheus.CounterVec   // loxilb_pd_kv_trt_polls_total{rule,endpoint,result}
}

// Values of the "result" labels.
const (
	ResultOK      = "ok"
	ResultError   = "error"
	ResultTimeout = "timeout"
	ResultHit     = "hit"
	ResultMiss    = "miss"
	ResultShared  = "shared" // coalesced onto another request's tokenisation
)

// NewKVRouting builds the KV routing metric set and registers it on reg.
func NewKVRouting(reg prometheus.Registerer) *KVRouting {
	r := &KVRouting{
		TokenizeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "loxilb_pd_kv_tokenize_duration_seconds",
			Help:    "Engine /tokenize round trips for Tier 1.5, by result (ok, error, timeout).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 12), // 0.5 ms … 1 s
		}, []string{"rule", "result"}),
		TokenizeCache: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loxilb_pd_kv_tokenize_cache_total",
			Help: "Tier 1.5 tokenisation lookups by result: hit, miss (engine asked), shared (coalesced).",
		}, []string{"rule", "result"}),
		Tier15Hits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loxilb_pd_kv_tier15_hits_total",
			Help: "Requests routed by the KV-exact tier (an endpoint held at least one prompt block).",
		}, []string{"rule"}),
		Tier15Misses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loxilb_pd_kv_tier15_misses_total",
			Help: "Requests the KV-exact tier let fall through, by reason.",
		}, []string{"rule", "reason"}),
		Tier15Pending: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loxilb_pd_kv_tier15_pending_hits_total",
			Help: "KV-exact tier hits on an endpoint whose events had not yet shown the blocks this gateway just sent it (--kv-pending-ttl).",
		}, []string{"rule"}),
		ZeroHitWatchdog: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loxilb_pd_kv_zero_hit_watchdog_total",
			Help: "Times a rule saw N consecutive zero-hit lookups while KV events were flowing (parity problem).",
		}, []string{"rule"}),
		TRTPolls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loxilb_pd_kv_trt_polls_total",
			Help: "TensorRT-LLM POST /kv_cache_events drains, by result (ok, error).",
		}, []string{"rule", "endpoint", "result"}),
	}
	reg.MustRegister(r.TokenizeDuration, r.TokenizeCache, r.Tier15Hits, r.Tier15Misses, r.Tier15Pending, r.ZeroHitWatchdog, r.TRTPolls)
	return r
}

// ForgetRule drops a removed rule's series.
func (r *KVRouting) ForgetRule(rule string) {
	l := prometheus.Labels{"rule": rule}
	r.TokenizeDuration.DeletePartialMatch(l)
	r.TokenizeCache.DeletePartialMatch(l)
	r.Tier15Hits.DeletePartialMatch(l)
	r.Tier15Misses.DeletePartialMatch(l)
	r.Tier15Pending.DeletePartialMatch(l)
	r.ZeroHitWatchdog.DeletePartialMatch(l)
	r.TRTPolls.DeletePartialMatch(l)
}
