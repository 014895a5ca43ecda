package metrics

import "github.com/prometheus/client_golang/prometheus"

// Flow covers admission windows and the gateway queue (datapath/flow):
// what was let through at once, what waited and how long, what was shed
// and why. Label `class` is the request's granted priority class (low,
// standard, high).
type Flow struct {
	Requests   *prometheus.CounterVec   // infergate_flow_requests_total{rule,class,result}
	Shed       *prometheus.CounterVec   // infergate_flow_shed_total{rule,class,reason}
	Wait       *prometheus.HistogramVec // infergate_flow_queue_wait_seconds{rule,class}
	Queued     *prometheus.GaugeVec     // infergate_flow_queued_requests{rule,class}
	Downgrades *prometheus.CounterVec   // infergate_flow_class_downgrades_total{rule,reason}
}

// NewFlow builds the flow-control families and registers them on reg.
func NewFlow(reg prometheus.Registerer) *Flow {
	f := &Flow{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_flow_requests_total",
			Help: "Requests on rules with an admission window, by granted class and result: direct (an endpoint had room), queued (dispatched after waiting), shed (503 worker_overload_protection_shed), client_gone (left while queued).",
		}, []string{"rule", "class", "result"}),
		Shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_flow_shed_total",
			Help: "Requests answered 503 worker_overload_protection_shed with Retry-After, by class and reason: queue_full, wait_exceeded, deadline, displaced.",
		}, []string{"rule", "class", "reason"}),
		Wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "infergate_flow_queue_wait_seconds",
			Help:    "Time requests dispatched after queueing spent in the gateway queue, by class.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16), // 1 ms … 33 s
		}, []string{"rule", "class"}),
		Queued: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "infergate_flow_queued_requests",
			Help: "Requests waiting in the rule's gateway queue now, by class.",
		}, []string{"rule", "class"}),
		Downgrades: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_flow_class_downgrades_total",
			Help: "Requests that did not get the class their header asked for: above_grant (clamped to what their API key, or the gateway for requests without one, allows), unknown_class (the default class).",
		}, []string{"rule", "reason"}),
	}
	reg.MustRegister(f.Requests, f.Shed, f.Wait, f.Queued, f.Downgrades)
	return f
}
