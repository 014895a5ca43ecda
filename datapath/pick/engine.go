package pick

import (
	"time"

	"github.com/infergate/infergate/enginestats"
)

// EngineLoad is what an engine says about its own load: its queue, its
// running batch and its KV cache, as of its last good scrape. It sees what
// the gateway's in-flight count cannot (another replica's requests, clients
// that bypass the gateway, KV pressure). The fields are a signal only when
// Valid: the scrape is fresh (within the staleness bound) and the engine
// exports its load families; otherwise a picker must behave as if the
// engine exported nothing.
type EngineLoad struct {
	Valid   bool
	Waiting int     // requests queued in the engine
	Running int     // requests in its running batch
	KVUsage float64 // fraction of its KV cache in use, 0..1; -1: not exported
	// Age is the time since the last good scrape (-1: none yet).
	Age time.Duration
}

// EngineLoadOf reads a snapshot cell at now (a nil cell or no snapshot yet:
// not Valid). It never blocks: the scraper publishes by pointer swap.
func EngineLoadOf(c *enginestats.Cell, now time.Time) EngineLoad {
	s := c.Load()
	if s == nil {
		return EngineLoad{Age: -1, KVUsage: -1}
	}
	l := EngineLoad{Valid: s.Valid(now), Age: s.Age(now), KVUsage: -1,
		Waiting: int(s.Sample.Waiting), Running: int(s.Sample.Running)}
	if s.Sample.Has(enginestats.FieldKVUsage) {
		l.KVUsage = s.Sample.KVUsage
	}
	return l
}

// EngineLoad reads the endpoint's snapshot at now.
func (l *Live) EngineLoad(now time.Time) EngineLoad { return EngineLoadOf(l.Engine, now) }
