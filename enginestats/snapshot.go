package enginestats

import (
	"sync/atomic"
	"time"
)

// Snapshot is one endpoint's engine state as last scraped. It is immutable
// once published; a Cell holds the current one.
type Snapshot struct {
	Engine string
	// Sample holds the values of the last good scrape (zero before one).
	Sample Sample
	// At is when the last good scrape finished (zero: none yet); the signal
	// is trusted until Expires.
	At      time.Time
	Expires time.Time
	// Reason is the outcome of the latest scrape: ReasonOK, or why it was
	// not taken (the values above then come from an earlier scrape).
	Reason string
	// Tried is when the latest scrape finished, good or not.
	Tried time.Time
	// Restarts counts counter resets seen (engine restarts).
	Restarts uint64
}

// Valid reports whether the snapshot is a signal at now: a good scrape
// with load families, not older than the staleness bound.
func (s *Snapshot) Valid(now time.Time) bool {
	return s != nil && !s.At.IsZero() && now.Before(s.Expires) && s.Sample.Signal()
}

// Age is the time since the last good scrape (-1 without one).
func (s *Snapshot) Age(now time.Time) time.Duration {
	if s == nil || s.At.IsZero() {
		return -1
	}
	return now.Sub(s.At)
}

// Cell publishes an endpoint's current Snapshot. The scraper stores, any
// number of readers load; neither waits.
type Cell struct{ p atomic.Pointer[Snapshot] }

// Load returns the current snapshot (nil before the first scrape).
func (c *Cell) Load() *Snapshot {
	if c == nil {
		return nil
	}
	return c.p.Load()
}

func (c *Cell) store(s *Snapshot) { c.p.Store(s) }
