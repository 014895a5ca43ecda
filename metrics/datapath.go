package metrics

import "github.com/prometheus/client_golang/prometheus"

// Label values shared by the datapath families. Enumerated gauges use small
// integers so one series per endpoint is enough (no one-hot label sets).
const (
	HealthProbing = 0 // infergate_datapath_endpoint_health_state: not yet trusted
	HealthActive  = 1
	HealthDown    = 2

	BreakerClosed   = 0 // infergate_datapath_breaker_state
	BreakerOpen     = 1
	BreakerHalfOpen = 2
)

// Datapath covers the fullproxy request path: per-rule and per-endpoint
// traffic, endpoint health and the circuit breaker. Label `rule` is the rule
// name, or its key string when the rule has no name; `endpoint` is "ip:port".
type Datapath struct {
	Requests     *prometheus.CounterVec // infergate_datapath_requests_total{rule,endpoint,code,error}
	Active       *prometheus.GaugeVec   // infergate_datapath_active_requests{rule,endpoint}
	Latency      *HistogramVec          // infergate_datapath_request_duration_seconds{rule}
	TTFB         *HistogramVec          // infergate_datapath_time_to_first_byte_seconds{rule}
	Health       *prometheus.GaugeVec   // infergate_datapath_endpoint_health_state{rule,endpoint}
	Breaker      *prometheus.GaugeVec   // infergate_datapath_breaker_state{rule,endpoint}
	BreakerTrans *prometheus.CounterVec // infergate_datapath_breaker_transitions_total{rule,endpoint,to}
	CBFlips      prometheus.Counter     // loxilb_pd_cb_flips_total (LoxiLB name, every transition)
	Retries      *prometheus.CounterVec // infergate_datapath_retries_total{rule}
	Failover     *prometheus.CounterVec // infergate_datapath_connect_failover_total{rule}
	Panics       prometheus.Counter     // infergate_datapath_panics_total
	Listeners    prometheus.Gauge       // infergate_datapath_listeners
	// AccessLogDropped counts access lines a stalled log output made the
	// buffered writer drop rather than stall requests (accesslog).
	AccessLogDropped prometheus.Counter // infergate_access_log_dropped_lines_total
}

// NewDatapath builds the datapath families and registers them on reg. Tests
// pass a fresh prometheus.NewRegistry().
func NewDatapath(reg prometheus.Registerer) *Datapath {
	d := &Datapath{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_datapath_requests_total",
			Help: "Proxied requests by rule, endpoint (empty when none was chosen), HTTP status code and infergate error code (empty on success).",
		}, []string{"rule", "endpoint", "code", "error"}),
		Active: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "infergate_datapath_active_requests",
			Help: "Requests currently in flight to an endpoint (the least-connections load).",
		}, []string{"rule", "endpoint"}),
		Latency: NewHistogramVec(prometheus.HistogramOpts{
			Name:    "infergate_datapath_request_duration_seconds",
			Help:    "Time from request arrival to the last response byte, by rule.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
		}, []string{"rule"}),
		TTFB: NewHistogramVec(prometheus.HistogramOpts{
			Name:    "infergate_datapath_time_to_first_byte_seconds",
			Help:    "Time from request arrival to the engine's response headers, by rule.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
		}, []string{"rule"}),
		Health: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "infergate_datapath_endpoint_health_state",
			Help: "Probe state per endpoint: 0 probing, 1 active, 2 down.",
		}, []string{"rule", "endpoint"}),
		Breaker: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "infergate_datapath_breaker_state",
			Help: "Circuit breaker state per endpoint: 0 closed, 1 open, 2 half-open.",
		}, []string{"rule", "endpoint"}),
		BreakerTrans: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_datapath_breaker_transitions_total",
			Help: "Circuit breaker transitions per endpoint by target state (closed, open, half-open).",
		}, []string{"rule", "endpoint", "to"}),
		CBFlips: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loxilb_pd_cb_flips_total",
			Help: "Every circuit breaker transition (LoxiLB-compatible name).",
		}),
		Retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_datapath_retries_total",
			Help: "Requests re-sent to another endpoint because the dial failed (never reached an engine).",
		}, []string{"rule"}),
		// LoxiLB counts these in loxilb_pd_connect_failover_total for P/D
		// and single-pool alike; that name belongs to the PD family
		// (metrics/pd.go), so single-pool failovers get their own.
		Failover: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_datapath_connect_failover_total",
			Help: "Single-pool requests that succeeded on another endpoint after a dial failure.",
		}, []string{"rule"}),
		Panics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "infergate_datapath_panics_total",
			Help: "Request handler panics recovered by the datapath.",
		}),
		Listeners: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "infergate_datapath_listeners",
			Help: "VIP:port listeners currently bound.",
		}),
		AccessLogDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "infergate_access_log_dropped_lines_total",
			Help: "Access log lines dropped because the log output stalled: both buffers full, one still being written.",
		}),
	}
	reg.MustRegister(d.Requests, d.Active, d.Latency, d.TTFB, d.Health, d.Breaker,
		d.BreakerTrans, d.CBFlips, d.Retries, d.Failover, d.Panics, d.Listeners, d.AccessLogDropped)
	return d
}
