package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Refusal reasons of infergate_edge_connections_refused_total.
const (
	RefusedGlobal   = "global"   // the daemon-wide client connection cap
	RefusedListener = "listener" // the VIP's connectionLimit
	RefusedPerIP    = "per_ip"   // the per-client-address cap
)

// Edge covers the front door: connection admission on the VIP listeners
// (package admission) and the memory held by request bodies in flight
// (package datapath/reqbody).
type Edge struct {
	Connections    prometheus.Gauge       // infergate_edge_client_connections
	Refused        *prometheus.CounterVec // infergate_edge_connections_refused_total{reason}
	Evicted        prometheus.Counter     // infergate_edge_idle_evictions_total
	BodyBytes      prometheus.Gauge       // infergate_edge_body_bytes_in_flight
	BodyOverloaded prometheus.Counter     // infergate_edge_body_overloaded_total
	// Requests admitted and not yet answered (HTTP/2 streams and HTTP/1.1
	// requests), read at each scrape from the count admission keeps anyway
	// (CountRequestsFrom), and those refused at a cap, by reason.
	RequestsInFlight prometheus.GaugeFunc   // infergate_edge_requests_in_flight
	RequestsRefused  *prometheus.CounterVec // infergate_edge_requests_refused_total{reason}

	inFlight atomic.Pointer[func() int] // RequestsInFlight's source; nil: 0
}

// CountRequestsFrom makes n the source of infergate_edge_requests_in_flight.
// Why a source and not a gauge moved per request: admission counts the
// requests in flight for its caps already, and a gauge's increment and
// decrement were two more atomic updates per request on a cache line
// every core writes.
func (e *Edge) CountRequestsFrom(n func() int) { e.inFlight.Store(&n) }

// NewEdge registers the edge family on reg.
func NewEdge(reg prometheus.Registerer) *Edge {
	e := &Edge{
		Connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "infergate_edge_client_connections",
			Help: "Client connections currently open on the VIP listeners (admitted, not yet closed).",
		}),
		Refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_edge_connections_refused_total",
			Help: "Client connections closed at accept because a cap was reached, by reason (global, listener, per_ip).",
		}, []string{"reason"}),
		Evicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "infergate_edge_idle_evictions_total",
			Help: "Idle client connections closed at the global cap to admit a new connection.",
		}),
		BodyBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "infergate_edge_body_bytes_in_flight",
			Help: "Bytes of request-body buffers currently held by requests being read or served.",
		}),
		BodyOverloaded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "infergate_edge_body_overloaded_total",
			Help: "Requests answered 503 overloaded because the in-flight body memory budget was full.",
		}),
		RequestsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_edge_requests_refused_total",
			Help: "Client requests (HTTP/2 streams included) refused because a cap on requests in flight was reached, by reason (global, listener, per_ip).",
		}, []string{"reason"}),
	}
	e.RequestsInFlight = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "infergate_edge_requests_in_flight",
		Help: "Client requests being served on the VIP listeners (each HTTP/2 stream and each HTTP/1.1 request).",
	}, func() float64 {
		if n := e.inFlight.Load(); n != nil {
			return float64((*n)())
		}
		return 0
	})
	for _, r := range []string{RefusedGlobal, RefusedListener, RefusedPerIP} {
		e.Refused.WithLabelValues(r) // every reason is exported from the start, at 0
		e.RequestsRefused.WithLabelValues(r)
	}
	reg.MustRegister(e.Connections, e.Refused, e.Evicted, e.BodyBytes, e.BodyOverloaded, e.RequestsInFlight, e.RequestsRefused)
	return e
}
