package metrics

import "github.com/prometheus/client_golang/prometheus"

// API covers the management REST API.
type API struct {
	Requests *prometheus.CounterVec   // infergate_api_requests_total{method,route,code}
	Latency  *prometheus.HistogramVec // infergate_api_request_duration_seconds{method,route}
}

func newAPI(reg prometheus.Registerer) *API {
	a := &API{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_api_requests_total",
			Help: "Management API requests by method, route template and HTTP status code.",
		}, []string{"method", "route", "code"}),
		Latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "infergate_api_request_duration_seconds",
			Help:    "Management API request latency by method and route template.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}, []string{"method", "route"}),
	}
	reg.MustRegister(a.Requests, a.Latency)
	return a
}
