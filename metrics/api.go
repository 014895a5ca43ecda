package metrics

import "github.com/prometheus/client_golang/prometheus"

// API covers the management REST API. Routes are labelled by their template
// (e.g. /netlox/v1/config/loadbalancer/name/:name), never the raw path, so a
// client walking many rules cannot blow up the series count.
type API struct {
	Requests *prometheus.CounterVec   // infergate_api_requests_total{method,route,code}
	Latency  *prometheus.HistogramVec // infergate_api_request_duration_seconds{method,route}
	Panics   prometheus.Counter       // infergate_api_panics_total

	// Access control (api/auth).
	AuthDenied   *prometheus.CounterVec // infergate_api_auth_denied_total{reason}
	TokenReloads *prometheus.CounterVec // infergate_api_token_reloads_total{trigger,result}
}

// NewAPI registers the API family on reg. Exported so API tests can build
// just this family, independent of the other areas.
func NewAPI(reg prometheus.Registerer) *API {
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
		Panics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "infergate_api_panics_total",
			Help: "Management API handler panics recovered and answered with 500; any increase is a bug.",
		}),
		AuthDenied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_api_auth_denied_total",
			Help: "Management API requests refused by access control, by reason (host_not_allowed, missing_token, invalid_token, read_only).",
		}, []string{"reason"}),
		TokenReloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_api_token_reloads_total",
			Help: "Token file reloads by trigger (sighup, file_change) and result (ok, unchanged, error; on error the previous tokens stay in force).",
		}, []string{"trigger", "result"}),
	}
	reg.MustRegister(a.Requests, a.Latency, a.Panics, a.AuthDenied, a.TokenReloads)
	return a
}
