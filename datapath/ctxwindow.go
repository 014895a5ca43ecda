package datapath

import (
	"context"
	"time"

	"github.com/infergate/infergate/enginestats"
	"github.com/infergate/infergate/spec"
	"github.com/sirupsen/logrus"
)

// Learned context windows: a P/D rule that tokenises prompts (kvExactMode)
// refuses a prompt that fits no leg (contextlen.go), which needs each
// engine's max_model_len. When neither the rule nor the endpoint sets it,
// the runtime reads it from the engine's own GET /v1/models (vLLM's cards
// carry max_model_len): once when the rule is installed, then every
// enginestats ModelsRefresh, in one goroutine per such rule that exits with
// the rule (or when an update no longer needs it). The request path only
// loads an atomic. A read that fails or reports no sane window leaves the
// last learned value in place (an engine that is briefly unreachable has
// not changed its window); a configured window always wins.

// windowFetchTimeout bounds one /v1/models (or Mooncake /query) read.
const windowFetchTimeout = 2 * time.Second

// learnsFacts reports whether rule r needs a reader: context windows,
// engine ids or admission windows (enginewindow.go) to learn.
func (rt *Runtime) learnsFacts(r *spec.Rule) bool {
	return learnsWindows(r) || learnsEngineIDs(r) || rt.learnsAdmission(r)
}

// learnsWindows reports whether rule r needs windows read from its
// engines: a P/D rule whose KV-exact tier tokenises prompts, with an
// endpoint whose window is not configured.
func learnsWindows(r *spec.Rule) bool {
	if r.PD == nil || r.KV == nil || r.KV.Mode == 0 {
		return false
	}
	for i := range r.Endpoints {
		if r.MaxModelLenOf(i) == 0 {
			return true
		}
	}
	return false
}

// windowOf is endpoint i's context window: the configured one, else the
// one learned from the engine (0: unknown).
func (c *compiled) windowOf(i int) int {
	if n := c.rule.MaxModelLenOf(i); n > 0 {
		return n
	}
	return int(c.eps[i].window.Load())
}

// followWindowsLocked starts rs's reader (windows, and Mooncake engine
// ids: mooncakeid.go) when its current generation needs one and none runs
// (rt.mu held).
func (rt *Runtime) followWindowsLocked(rs *ruleState) {
	every, on := rt.opts.Engine.ModelsEvery()
	if !on || rs.learning || !rt.learnsFacts(rs.cur.Load().rule) {
		return
	}
	rs.learning = true
	rt.learners.Add(1)
	go rt.learnWindows(rs, every)
}

// learnWindows reads the context windows and batch limits of rs's
// endpoints now and every period, and its Mooncake prefills' engine ids at
// least every engineIDRefresh, until the rule is removed or needs none.
func (rt *Runtime) learnWindows(rs *ruleState, every time.Duration) {
	defer rt.learners.Done()
	ctx, cancel := rs.untilStopped()
	defer cancel()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-rs.stop:
			return
		case <-t.C:
		}
		c := rs.cur.Load()
		if !rt.learnsFacts(c.rule) && rt.learnerIdle(rs) {
			return
		}
		if learnsWindows(c.rule) {
			rt.readWindows(ctx, c)
		}
		if rt.learnsAdmission(c.rule) {
			rt.readBatchLimits(ctx, rs, c)
		}
		next := every
		if learnsEngineIDs(c.rule) {
			rt.readEngineIDs(ctx, c)
			next = min(next, engineIDRefresh)
		}
		t.Reset(next)
	}
}

// engineScheme is the URL scheme that reaches generation c's engines:
// https when they speak TLS (c.probe then trusts them as the rule says).
func (c *compiled) engineScheme() string {
	if c.probe != nil {
		return "https://"
	}
	return "http://"
}

// readWindows reads each unconfigured endpoint's window of generation c.
func (rt *Runtime) readWindows(ctx context.Context, c *compiled) {
	scheme := c.engineScheme()
	hc := c.probeClient(rt)
	for i, se := range c.rule.Endpoints {
		if c.rule.MaxModelLenOf(i) > 0 {
			continue
		}
		fctx, cancel := context.WithTimeout(ctx, windowFetchTimeout)
		n, err := enginestats.FetchMaxModelLen(fctx, hc, scheme+se.Addr.String()+pathModels, c.rule.Key.ModelName)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			rt.log.WithFields(logrus.Fields{"rule": c.label, "endpoint": se.ID, "error": err.Error()}).Debug("context window not read; keeping the last one")
			continue
		}
		if old := c.eps[i].window.Swap(int64(n)); old != int64(n) {
			rt.log.WithFields(logrus.Fields{"rule": c.label, "endpoint": se.ID, "max_model_len": n}).Info("context window learned from the engine")
		}
	}
}

// learnerIdle reports whether rs's reader may stop: its current
// generation has no engine fact to learn (learnsFacts). Decided under
// rt.mu, where generations are swapped and followWindowsLocked runs, so an
// update that needs facts again either sees this reader still running or
// starts a new one.
func (rt *Runtime) learnerIdle(rs *ruleState) bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.learnsFacts(rs.cur.Load().rule) {
		return false
	}
	rs.learning = false
	return true
}
