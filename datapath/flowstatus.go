package datapath

import (
	"time"

	"github.com/infergate/infergate/datapath/flow"
	"github.com/infergate/infergate/spec"
)

// Flow control as the rule's status and explanation show it: each
// endpoint's admission window against the requests holding its slots, and
// the rule's gateway queue. Both read what the windows and the queue keep
// anyway; nothing here runs on the request path.

// windowStatus is endpoint i's window view; nil when the rule sets no
// window for it.
func (c *compiled) windowStatus(i int) *spec.WindowStatus {
	if c.win == nil || c.win[i] == nil {
		return nil
	}
	w := c.win[i]
	n, limit := w.InFlight(), w.Limit()
	v := &spec.WindowStatus{Limit: limit, InFlight: n, Full: w.Full()}
	if c.rule.WindowOf(i) == 0 { // learned from the engine (enginewindow.go)
		if l := c.eps[i].batch.Load(); l != nil {
			v.Source, v.EngineLimit, v.LearnError = l.source, l.n, l.reason
		}
	}
	return v
}

// queueStatus is the rule's gateway queue view at now; nil when the rule
// has no windows (and so no queue).
func (c *compiled) queueStatus(now time.Time) *spec.QueueStatus {
	if c.fq == nil {
		return nil
	}
	st := c.fq.Stats(now)
	v := &spec.QueueStatus{Queued: st.Queued, ByClass: make(map[string]int, flow.NumClasses),
		OldestWaitSec: st.OldestWait.Seconds(), Shed: st.Shed}
	for cl, n := range st.ByClass {
		v.ByClass[flow.Class(cl).String()] = n
	}
	for _, n := range st.Shed {
		v.ShedTotal += n
	}
	return v
}
