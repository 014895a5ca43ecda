package daemon

import (
	"github.com/infergate/infergate/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// pendingCounter is the rule store's count of stored rules the datapath
// does not serve yet (*store.Store).
type pendingCounter interface{ Pending() int }

// exportPending publishes the store's pending rules as
// infergate_store_pending_rules: a rule kept at boot but not installed (its
// certificate missing, its VIP address not up) is retried in the
// background, and this is how an operator sees it waiting.
func exportPending(m *metrics.Metrics, s pendingCounter) {
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "infergate_store_pending_rules",
		Help: "Stored rules the datapath does not serve yet (installation retried with backoff); their GET status says why.",
	}, func() float64 { return float64(s.Pending()) }))
}
