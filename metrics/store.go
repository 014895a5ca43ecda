package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Store covers the rule store's backend: values refused on replay or from
// the shared store's watch, and (with etcd) the watch's health and how far
// this replica's served set lags the store's revision.
type Store struct {
	// RejectedValues counts stored values never applied, by reason
	// (malformed, invalid, key_mismatch, immutable_field, install_failed,
	// duplicate).
	RejectedValues *prometheus.CounterVec // infergate_store_rejected_values_total{reason}
	// WatchRestarts counts re-opened etcd watches (disconnect, leader loss).
	WatchRestarts prometheus.Counter // infergate_store_watch_restarts_total
	// Resyncs counts full reloads after the watched revision was compacted.
	Resyncs prometheus.Counter // infergate_store_resyncs_total
	// Reachable is 1 while the backend answers its health probe.
	Reachable prometheus.Gauge // infergate_store_reachable
	// AppliedRevision is the store revision the served rule set reflects.
	AppliedRevision prometheus.Gauge // infergate_store_applied_revision
	// RevisionLag is the store's last seen revision minus the applied one.
	RevisionLag prometheus.Gauge // infergate_store_revision_lag
	// RegistrationChanges counts engine registrations appearing or leaving.
	RegistrationChanges *prometheus.CounterVec // infergate_store_registration_changes_total{change}
	// --- endpointSelector rules ---
	// RegistrationsRefused counts registrations a selector rule refused.
	RegistrationsRefused *prometheus.CounterVec // infergate_store_registrations_refused_total{reason}
	// PendingRules is infergate_store_pending_rules, read from pending.
	PendingRules prometheus.GaugeFunc
	// pending reads the store's count of stored rules the datapath does not
	// serve yet (SetPendingSource), at scrape time:
	// infergate_store_pending_rules. A rule kept at boot but not installed
	// (its certificate missing, its VIP address not up) is retried in the
	// background, and this is how an operator sees it waiting.
	pending atomic.Pointer[func() int]
}

// SetPendingSource points infergate_store_pending_rules at the rule store.
func (s *Store) SetPendingSource(f func() int) { s.pending.Store(&f) }

// NewStore builds the rule-store metric set and registers it on reg.
func NewStore(reg prometheus.Registerer) *Store {
	s := &Store{
		RejectedValues: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_store_rejected_values_total",
			Help: "Stored rule values refused (never applied) at replay or from the store's watch, by reason.",
		}, []string{"reason"}),
		WatchRestarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "infergate_store_watch_restarts_total",
			Help: "Times the etcd watch of the rule prefix was re-opened after a disconnect or leader loss.",
		}),
		Resyncs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "infergate_store_resyncs_total",
			Help: "Full reloads of the rule set because the watched etcd revision was compacted.",
		}),
		Reachable: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "infergate_store_reachable",
			Help: "1 while the rule store answers its health probe (always 1 for the file store).",
		}),
		AppliedRevision: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "infergate_store_applied_revision",
			Help: "Store revision the served rule set reflects; replicas that agree on it serve the same rules.",
		}),
		RevisionLag: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "infergate_store_revision_lag",
			Help: "Last revision seen from the store minus the applied revision (0 when caught up).",
		}),
		RegistrationChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_store_registration_changes_total",
			Help: "Engine self-registrations that appeared (added) or left (removed: deleted or lease expired).",
		}, []string{"change"}),
		RegistrationsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_store_registrations_refused_total",
			Help: "Engine registrations an endpointSelector rule refused (reason: invalid, engine, role, bootstrap_port, kv, limit), counted when the refusal starts.",
		}, []string{"reason"}),
	}
	s.Reachable.Set(1)
	s.PendingRules = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "infergate_store_pending_rules",
		Help: "Stored rules the datapath does not serve yet (installation retried with backoff); their GET status says why.",
	}, func() float64 {
		if f := s.pending.Load(); f != nil {
			return float64((*f)())
		}
		return 0
	})
	reg.MustRegister(s.PendingRules, s.RejectedValues, s.WatchRestarts, s.Resyncs, s.Reachable, s.AppliedRevision, s.RevisionLag, s.RegistrationChanges, s.RegistrationsRefused)
	return s
}
