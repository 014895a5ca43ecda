package metrics

import "github.com/prometheus/client_golang/prometheus"

// Engine re-exports what each engine says about its own load (scraped from
// its /metrics by enginestats) under infergate names, per rule and endpoint,
// with the scrapes' outcomes. Gauges hold the last good scrape; a scrape
// that is not taken leaves them and counts its reason.
type Engine struct {
	Waiting    *prometheus.GaugeVec   // infergate_engine_requests_waiting{rule,endpoint}
	Running    *prometheus.GaugeVec   // infergate_engine_requests_running{rule,endpoint}
	KVUsage    *prometheus.GaugeVec   // infergate_engine_kv_cache_usage_ratio{rule,endpoint}
	LastScrape *prometheus.GaugeVec   // infergate_engine_last_scrape_timestamp_seconds{rule,endpoint}
	Scrapes    *prometheus.CounterVec // infergate_engine_scrapes_total{rule,endpoint,result}
	Duration   prometheus.Histogram   // infergate_engine_scrape_duration_seconds
}

// NewEngine builds the engine-signal metric set and registers it on reg.
func NewEngine(reg prometheus.Registerer) *Engine {
	ep := []string{"rule", "endpoint"}
	e := &Engine{
		Waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "infergate_engine_requests_waiting",
			Help: "Requests queued inside the engine (vllm:num_requests_waiting, sglang:num_queue_reqs, trtllm_num_requests_waiting), last good scrape.",
		}, ep),
		Running: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "infergate_engine_requests_running",
			Help: "Requests in the engine's running batch, last good scrape.",
		}, ep),
		KVUsage: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "infergate_engine_kv_cache_usage_ratio",
			Help: "Fraction of the engine's KV cache in use (0..1), last good scrape.",
		}, ep),
		LastScrape: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "infergate_engine_last_scrape_timestamp_seconds",
			Help: "Unix time of the endpoint's last good scrape (the signal is ignored --engine-signal-stale-after later).",
		}, ep),
		Scrapes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_engine_scrapes_total",
			Help: "Engine metric scrapes by result: ok, or the reason the scrape was not taken.",
		}, []string{"rule", "endpoint", "result"}),
		Duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "infergate_engine_scrape_duration_seconds",
			Help:    "Engine metric scrapes, request to parsed body, every result.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 12), // 0.5 ms … 1 s
		}),
	}
	reg.MustRegister(e.Waiting, e.Running, e.KVUsage, e.LastScrape, e.Scrapes, e.Duration)
	return e
}

// ForgetEndpoint drops one endpoint's series (it left the rule).
func (e *Engine) ForgetEndpoint(rule, endpoint string) {
	l := prometheus.Labels{"rule": rule, "endpoint": endpoint}
	e.Waiting.Delete(l)
	e.Running.Delete(l)
	e.KVUsage.Delete(l)
	e.LastScrape.Delete(l)
	e.Scrapes.DeletePartialMatch(l)
}
