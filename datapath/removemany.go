package datapath

import (
	"github.com/infergate/infergate/spec"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Why a batch removal: removing a rule drops its metric series, and a
// metric family can only find a rule's series by scanning all of them
// (DeletePartialMatch). Removing n rules one by one therefore scans every
// family n times: with 10,000 rules, deleting them all held the store for
// about a minute. RemoveMany stops serving every rule first, then drops the
// series of all of them in one scan per family.

// ruleVec is a metric family with a rule label.
type ruleVec interface {
	prometheus.Collector
	DeletePartialMatch(prometheus.Labels) int
	Delete(prometheus.Labels) bool
}

// ruleVecs are the families that carry a "rule" label, each dropped with
// the rule.
func (rt *Runtime) ruleVecs() []ruleVec {
	return []ruleVec{
		rt.m.Requests, rt.m.Active, rt.m.Health, rt.m.Breaker, rt.m.BreakerTrans,
		rt.m.Latency, rt.m.TTFB, rt.m.Retries, rt.m.Failover,
		rt.pdm.LegRequests, rt.pdm.LadderDecisions, rt.pdm.SessionHits, rt.pdm.FallbackToNormal,
		rt.rx.CHWBLPicks, rt.rx.CHWBLBoundSkips, rt.rx.MatchRate,
		rt.pdm.ClientTTFT, rt.pdm.KVConnector,
		// pd.Record's families and the P/D counters pdserve.go updates
		rt.pdm.Requests, rt.pdm.RoomRetries, rt.pdm.TRTEarlyExits, rt.pdm.KVTransferFailures,
		rt.pdm.PrefillDeaths, rt.pdm.DecodeDeaths, rt.pdm.Failovers, rt.pdm.DecodeFailovers,
		rt.pdm.HandoffInvalid, rt.pdm.PrefillDuration, rt.pdm.DecodeTTFB, rt.pdm.Duration,
		rt.pdm.Unsplit, rt.pdm.ClientTransferState,
		rt.llm.TTFT, rt.llm.TPOT, rt.llm.ITL, rt.llm.Duration, rt.llm.Endpoint,
		rt.fm.Requests, rt.fm.Shed, rt.fm.Wait, rt.fm.Queued, rt.fm.Downgrades,
	}
}

// RemoveMany stops serving every rule of rs, as Remove does one by one,
// and drops their series in one scan per metric family.
func (rt *Runtime) RemoveMany(rs []*spec.Rule) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	labels := make(map[string]bool, len(rs))
	for _, r := range rs {
		if label, ok := rt.unserveLocked(r.Key); ok {
			labels[label] = true
		}
	}
	if len(labels) == 1 {
		for label := range labels {
			rt.deleteRuleSeries(label)
		}
		return
	}
	rt.deleteSeriesOf(labels)
}

// deleteSeriesOf drops every series whose rule label is in labels: one
// Collect per family, then exact deletes.
func (rt *Runtime) deleteSeriesOf(labels map[string]bool) {
	if len(labels) == 0 {
		return
	}
	for _, v := range rt.ruleVecs() {
		ch := make(chan prometheus.Metric, 64)
		go func() { v.Collect(ch); close(ch) }()
		var drop []prometheus.Labels
		for m := range ch {
			var d dto.Metric
			if m.Write(&d) != nil {
				continue
			}
			ls := make(prometheus.Labels, len(d.Label))
			for _, p := range d.Label {
				ls[p.GetName()] = p.GetValue()
			}
			if labels[ls["rule"]] {
				drop = append(drop, ls)
			}
		}
		for _, ls := range drop {
			v.Delete(ls)
		}
	}
}
