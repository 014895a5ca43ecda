package datapath

import (
	"context"

	"github.com/infergate/infergate/enginestats"
	"github.com/infergate/infergate/spec"
	"github.com/sirupsen/logrus"
)

// Admission windows learned from the engines: with enginestats
// LearnWindows on, an endpoint with no configured window (neither the
// rule's admission_window nor its own; never a P/D prefill, which takes
// only its own) gets one sized from the engine's batch limit — SGLang's
// max_running_requests, vLLM's max_num_seqs, TensorRT-LLM's
// max_num_active_requests, where the engine tells it
// (enginestats.FetchBatchLimit) — times this gateway's share
// (WindowShare). The context-window reader (ctxwindow.go) reads it with
// the rest of the engine facts: at install, then every ModelsRefresh, off
// the request path. Until a limit is known the window admits everyone; a
// read that fails or says nothing sane keeps the last limit (with the
// reason shown in /status); a configured window always wins. A new limit
// resizes the window in place (window.SetLimit): requests in flight keep
// their slots.

// learnedLimit is what the last reads of an endpoint's batch limit
// found: the limit and where it was read (zero until one is), and why the
// latest read was not taken ("" when it was).
type learnedLimit struct {
	n      int
	source string
	reason string
}

// learnsWindowOf reports whether endpoint i of rule r takes its admission
// window from the engine: learning is on and the rule configures none for
// it (a P/D prefill without its own window has none at all).
func (rt *Runtime) learnsWindowOf(r *spec.Rule, i int) bool {
	return rt.opts.Engine.LearnsWindows() && r.WindowOf(i) == 0 &&
		(r.PD == nil || r.Endpoints[i].Role != spec.RolePrefill)
}

// learnsAdmission reports whether rule r has a window to learn.
func (rt *Runtime) learnsAdmission(r *spec.Rule) bool {
	for i := range r.Endpoints {
		if rt.learnsWindowOf(r, i) {
			return true
		}
	}
	return false
}

// admissionOf is endpoint i's admission window in generation c: the
// configured one, else this gateway's share of the learned batch limit (0:
// not known yet); learned says the window is to be learned.
func (rt *Runtime) admissionOf(c *compiled, i int) (n int, learned bool) {
	if n := c.rule.WindowOf(i); n > 0 {
		return n, false
	}
	if !rt.learnsWindowOf(c.rule, i) {
		return 0, false
	}
	if l := c.eps[i].batch.Load(); l != nil {
		return rt.opts.Engine.ShareOf(l.n), true
	}
	return 0, true
}

// readBatchLimits reads the batch limit of each endpoint of generation c
// that learns its window, then resizes the current generation's windows.
func (rt *Runtime) readBatchLimits(ctx context.Context, rs *ruleState, c *compiled) {
	scheme := c.engineScheme()
	hc := c.probeClient(rt)
	for i, se := range c.rule.Endpoints {
		if !rt.learnsWindowOf(c.rule, i) {
			continue
		}
		fctx, cancel := context.WithTimeout(ctx, windowFetchTimeout)
		got, err := enginestats.FetchBatchLimit(fctx, hc, scheme+se.Addr.String())
		cancel()
		if ctx.Err() != nil {
			return
		}
		ep := c.eps[i]
		old := ep.batch.Load()
		next := learnedLimit{n: got.N, source: got.Source}
		if err != nil {
			next = learnedLimit{reason: err.Error()}
			if old != nil {
				next.n, next.source = old.n, old.source
			}
			rt.log.WithFields(logrus.Fields{"rule": c.label, "endpoint": se.ID, "error": err.Error()}).Debug("batch limit not read; keeping the last one")
		} else if old == nil || old.n != got.N || old.source != got.Source {
			rt.log.WithFields(logrus.Fields{"rule": c.label, "endpoint": se.ID, "batch_limit": got.N, "source": got.Source,
				"window": rt.opts.Engine.ShareOf(got.N)}).Info("admission window learned from the engine")
		}
		if old == nil || *old != next {
			ep.batch.Store(&next)
		}
	}
	rt.resizeLearned(rs)
}

// resizeLearned sets the learned windows of rs's current generation to
// their endpoints' latest limits. Under rt.mu, where generations are
// swapped, so a rule update that configures a window is never overridden.
func (rt *Runtime) resizeLearned(rs *ruleState) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	c := rs.cur.Load()
	if c == nil || c.win == nil {
		return
	}
	for i, w := range c.win {
		if n, learned := rt.admissionOf(c, i); learned && w != nil && w.Limit() != n {
			w.SetLimit(n)
		}
	}
	c.fq.Release() // a larger window may have room for a waiter now
}
