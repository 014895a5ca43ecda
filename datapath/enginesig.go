package datapath

import (
	"time"

	"github.com/infergate/infergate/datapath/pick"
	"github.com/infergate/infergate/enginestats"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/spec"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
)

// Engine signals: every endpoint of every rule with an engine_metrics_path
// is a scrape target of rt.es; the scraper publishes into the endpoint's
// Cell and selection reads it into pick.Candidate.Engine. Nothing here
// changes a routing decision: the signal is carried and shown.

// newEngineScraper builds the runtime's scraper (em nil: a private registry).
func newEngineScraper(opts enginestats.Options, em *metrics.Engine, log logrus.FieldLogger) *enginestats.Scraper {
	if em == nil {
		em = metrics.NewEngine(prometheus.NewRegistry())
	}
	return enginestats.New(opts, em, log.WithField("component", "enginestats"))
}

// followEngines makes the scraper's targets for rule c's key exactly c's
// endpoints (none when the rule turns scraping off). Control plane, rt.mu.
func (rt *Runtime) followEngines(c *compiled) {
	r := c.rule
	owner := r.Key.String()
	if r.EngineMetricsPath == "" {
		rt.es.Drop(owner)
		return
	}
	scheme := c.engineScheme()
	ts := make([]enginestats.Target, 0, len(r.Endpoints))
	for i, se := range r.Endpoints {
		ts = append(ts, enginestats.Target{
			Rule: c.label, Endpoint: se.ID, Engine: string(r.Engine),
			URL:    scheme + se.Addr.String() + r.EngineMetricsPath,
			Client: c.probe, Cell: &c.eps[i].sig,
		})
	}
	rt.es.Set(owner, ts)
}

// engineLoad is endpoint ep's engine signal for a candidate list; the clock
// is read once per list, and only when some endpoint has a snapshot.
func (ep *endpoint) engineLoad(now *time.Time) pick.EngineLoad {
	if ep.sig.Load() == nil {
		return pick.EngineLoad{Age: -1, KVUsage: -1}
	}
	if now.IsZero() {
		*now = time.Now()
	}
	return pick.EngineLoadOf(&ep.sig, *now)
}

// engineStatus is the API view of ep's engine signal (nil: none yet).
func (ep *endpoint) engineStatus(now time.Time) *spec.EngineStatus {
	s := ep.sig.Load()
	if s == nil {
		return nil
	}
	l := pick.EngineLoadOf(&ep.sig, now)
	v := &spec.EngineStatus{Engine: s.Engine, Valid: l.Valid, Waiting: l.Waiting, Running: l.Running,
		KVUsage: l.KVUsage, AgeSec: -1, Result: s.Reason}
	if l.Age >= 0 {
		v.AgeSec = float64(l.Age.Milliseconds()) / 1000
	}
	if lr := s.Sample.LoRA; lr != nil {
		v.LoRARunning, v.LoRAWaiting = lr.Running, lr.Waiting
	}
	return v
}
