package pick

import (
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/enginestats"
	"github.com/infergate/infergate/metrics"
)

// Candidate is one endpoint as every picker sees it: who it is, where it
// sits in the rule, and the facts a choice may key on. It is the single
// currency of selection, so a new fact (an engine's queue depth, a cost
// estimate) is added here once and every picker can read it.
type Candidate struct {
	ID     string // endpoint ID ("ip:port")
	Index  int    // position in the compiled rule's endpoint list
	Weight int    // spec weight; 0 drains
	Backup bool   // in the backup tier (tried only when no primary is eligible)
	// Load is the requests in flight when a candidate list was taken. A
	// list handed to a Picker is a snapshot, so every tier of one decision
	// compares the same numbers; Pool's modes read Live instead.
	Load int
	// Live points at the endpoint's live facts (nil in snapshots built by
	// hand, as in tests); a Pool reads them on demand.
	Live Live
	// Engine is the engine's own view of its load when the list was taken
	// (scraped from its /metrics; engine.go). Read it only when Valid.
	Engine EngineLoad
}

// Live points at the live facts of one endpoint. The datapath owns and
// writes them (health probes, the circuit breaker, request accounting);
// pickers only read them, lock-free, so a pick never waits on a prober.
type Live struct {
	Health    *atomic.Int32 // metrics.HealthActive when probed healthy
	InFlight  *atomic.Int64 // requests in flight
	Breaker   *atomic.Int32 // metrics.Breaker* state
	OpenUntil *atomic.Int64 // unix nanos; valid while the breaker is open
	// Engine is the endpoint's last engine-metrics snapshot (nil: the
	// endpoint is not scraped).
	Engine *enginestats.Cell
}

// Healthy reports whether the endpoint's last probes say it serves.
func (l *Live) Healthy() bool { return l.Health.Load() == metrics.HealthActive }

// BreakerSelectable is the one rule for "the circuit breaker lets a new
// request be considered": closed always; open once its window is over (the
// caller then claims the single half-open trial); half-open never, its trial
// is in flight. now is filled lazily so the common closed case never reads
// the clock.
func BreakerSelectable(state *atomic.Int32, openUntil *atomic.Int64, now *int64) bool {
	switch state.Load() {
	case metrics.BreakerClosed:
		return true
	case metrics.BreakerOpen:
		if *now == 0 {
			*now = time.Now().UnixNano()
		}
		return *now >= openUntil.Load()
	}
	return false
}
