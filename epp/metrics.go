package epp

import "github.com/prometheus/client_golang/prometheus"

// Stream results, the values of infergate_epp_streams_total{result}.
const (
	ResultPicked      = "picked"      // a pick was sent
	ResultShed        = "shed"        // 429 answered
	ResultUnavailable = "unavailable" // 503 answered (no ready or eligible endpoint, empty subset)
	ResultRefused     = "refused"     // another status answered (400 bad hint, 413 body too large)
	ResultCanceled    = "canceled"    // the proxy cancelled or closed before the request was complete
	ResultMalformed   = "malformed"   // the proxy broke the protocol (InvalidArgument / FailedPrecondition)
	ResultError       = "error"       // the picker failed; gRPC Internal
)

// Process-wide bounds, the values of infergate_epp_bound_refusals_total{bound}.
const (
	BoundBodyMemory = "body_memory" // Options.BodyBudgetBytes
	BoundStreams    = "streams"     // Options.MaxStreams
)

// Served-report matches, the values of infergate_epp_served_total{match}.
const (
	ServedPrimary    = "primary"    // the first endpoint of the pick served
	ServedFallback   = "fallback"   // a later endpoint of the pick served (the proxy retried)
	ServedOther      = "other"      // an endpoint outside the pick served: a proxy misconfiguration
	ServedUnreported = "unreported" // the stream ended without a served report
)

// Metrics are the EPP's Prometheus families, registered on the registry the
// daemon passes in (never the global one).
type Metrics struct {
	Streams *prometheus.CounterVec // infergate_epp_streams_total{result}
	Active  prometheus.Gauge       // infergate_epp_active_streams
	Pick    prometheus.Histogram   // infergate_epp_pick_duration_seconds
	Served  *prometheus.CounterVec // infergate_epp_served_total{match}
	Bounded *prometheus.CounterVec // infergate_epp_bound_refusals_total{bound}
}

// NewMetrics creates the families and registers them on reg (nil: unregistered,
// for tests and benchmarks).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Streams: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_epp_streams_total",
			Help: "ext_proc streams by result (picked, shed, unavailable, refused, canceled, malformed, error). Rising malformed means a proxy speaks a mode the EPP does not support; rising error is a picker bug.",
		}, []string{"result"}),
		Active: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "infergate_epp_active_streams",
			Help: "ext_proc streams open now. Should track the proxy's in-flight requests; a climb without traffic means streams are not being closed.",
		}),
		Pick: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "infergate_epp_pick_duration_seconds",
			Help:    "Time from the end of the request body to the pick being sent (the EPP's added latency once the body is in).",
			Buckets: prometheus.ExponentialBuckets(0.00002, 2, 16),
		}),
		Served: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_epp_served_total",
			Help: "Served-endpoint reports from the proxy by match against the pick (primary, fallback, other, unreported). Rising other means the proxy ignores the pick.",
		}, []string{"match"}),
		Bounded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_epp_bound_refusals_total",
			Help: "Streams answered 429 by a process-wide bound: body_memory (the request bodies and headers held would pass --epp-body-budget-bytes) or streams (--epp-max-streams open already). Also counted in infergate_epp_streams_total{result=\"shed\"}. Rising: raise the bound if the process has the memory, or add replicas.",
		}, []string{"bound"}),
	}
	if reg != nil {
		reg.MustRegister(m.Streams, m.Active, m.Pick, m.Served, m.Bounded)
	}
	return m
}
