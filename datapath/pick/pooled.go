package pick

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Pooled learning. Every endpoint learns its own per-token and per-request
// costs (Costs.Observe), but one endpoint's samples are few and noisy: a
// time to first token carries the decode steps it landed between, the
// scrape's age, the host's stalls. Four identical llm-d-inference-sim
// engines learned per-token costs 250–330 µs apart in one run, which prices
// a cold 1,700-token prompt up to 140 ms dearer on one of them (as much as
// four or five more running requests) and sends cold work to the engine
// whose noise ran low.
//
// So an endpoint is priced at the fleet's pooled cost — the median of the
// endpoints' own learned costs, which one slower engine does not drag along
// — unless its own estimate stands off the pool by more than its noise: the
// part of the difference beyond PoolZ standard errors of the endpoint's
// EWMA (the spread of its samples, from an EWMA of their squared steps,
// times √(rate / (2 − rate))) is kept, the rest is dropped (a soft
// threshold). Identical engines share one price; an engine that is really
// slower (a smaller GPU, a busier host) keeps the difference its samples
// show beyond their scatter. An endpoint with no samples of its own starts
// at the pool, not the prior.

// PoolZ is how many standard errors of its own EWMA an endpoint's learned
// cost must stand off the pooled cost before the excess is priced.
const PoolZ = 2

// learnedCost is one learned cost (nanoseconds) with the EWMA of its
// samples' squared steps (float64 bits, ns²), which says how far apart its
// samples scatter. The prior's scatter is the prior itself (a coefficient
// of variation of 1): with nothing seen, nothing stands off the pool.
type learnedCost struct {
	mean atomic.Int64
	dev2 atomic.Uint64
	// raw is the EWMA of the implied samples without the LearnBound clamp
	// (ns; only fold touches it, under the endpoint's lock). The scatter is
	// measured around it, not around mean: an engine more than LearnBound
	// slower keeps mean at the bound, and its samples' distance from the
	// bound is bias, not noise — counted as scatter it would hide the very
	// difference it measures (a 5× slower engine priced at the pool).
	raw float64
}

func (c *learnedCost) init(prior time.Duration) {
	c.mean.Store(int64(prior))
	c.raw = float64(prior)
	c.dev2.Store(math.Float64bits(float64(prior) * float64(prior)))
}

// fold moves the cost rate of the way by step (the gap between what one
// sample implies and the cost), bounded within LearnBound of prior, and
// folds the sample's squared distance from the unclamped EWMA into the
// scatter. The caller serialises folds.
func (c *learnedCost) fold(step, rate float64, prior time.Duration) {
	mean := float64(c.mean.Load())
	c.mean.Store(int64(bounded(mean+rate*step, float64(prior))))
	dev := mean + step - c.raw // the sample's distance from the unclamped EWMA
	c.raw += rate * dev
	d := math.Float64frombits(c.dev2.Load())
	c.dev2.Store(math.Float64bits((1-rate)*d + rate*dev*dev))
}

// learnStep is what one observed time to first token says about the costs
// (a, p) (per token, per queued request; ns): the error of the estimate
// est would have had with them, shared between the prefill and the queue
// term in proportion to what each predicted, as steps per token (stepA,
// for u > 0) and per queued request (stepP, for q > 0). ok is false when
// nothing is learnable (a full hit on an idle engine).
func (m CostModel) learnStep(a, p float64, est Estimate, ttft time.Duration) (stepA, stepP float64, hasA, hasP, ok bool) {
	slow := est.Slowdown
	if !(slow >= 1) {
		slow = 1
	}
	u, q := float64(est.Uncached)*slow, est.QueueUnits
	pre, que := u*a, q*p
	if pre+que <= 0 {
		return 0, 0, false, false, false
	}
	err := float64(ttft) - float64(max(m.Overhead, 0))*slow - pre - que
	if u > 0 {
		stepA, hasA = err*(pre/(pre+que))/u, true
	}
	if q > 0 {
		stepP, hasP = err*(que/(pre+que))/q, true
	}
	return stepA, stepP, hasA, hasP, true
}

// costPool is the pooled per-token and per-request costs (ns) of the
// endpoints one view compares: the medians of their own learned costs,
// recomputed after each observation made through that view (Costs.repool).
type costPool struct {
	tok, req atomic.Int64

	// mu serialises repools over scratch slices they reuse, so a pool
	// past a few dozen endpoints does not allocate two slices on every
	// observation.
	mu             sync.Mutex
	tokBuf, reqBuf []int64
}

// Scoped returns a view of s that prices with the same per-endpoint state
// (learning, backlog clocks) but pools over the endpoints ids alone: the
// candidates one rule compares. One gateway serves rules of different
// models (an 8B pool and a 70B pool), and a median over all of them would
// price each pool partly at the other's speed; and a rollout's departed
// pod addresses, whose learned costs stay in s, drop out of the median
// with the rule that named them. The pool starts at the median of what
// the members already learned, so recompiling a rule keeps its prices.
// An endpoint in two rules learns once; the other rule's pool takes it in
// at its own next observation.
func (s *Costs) Scoped(ids []string) *Costs {
	v := &Costs{m: s.m, eps: s.eps, members: make([]*endpointCost, 0, len(ids))}
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			v.members = append(v.members, s.endpoint(id))
		}
	}
	v.pool = newCostPool(s.m, len(v.members))
	v.repool()
	return v
}

// newCostPool is a pool at m's priors (until a member has learned), with
// scratch for n members.
func newCostPool(m CostModel, n int) *costPool {
	p := &costPool{tokBuf: make([]int64, 0, n), reqBuf: make([]int64, 0, n)}
	p.tok.Store(int64(m.PerToken))
	p.req.Store(int64(m.PerRequest))
	return p
}

// median is the median of v (not empty; v is reordered).
func median(v []int64) int64 {
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return v[n/2-1] + (v[n/2]-v[n/2-1])/2
}

// repool recomputes the pool over the members (every endpoint when s is
// not scoped) that have learned from at least one sample (the priors
// while none has).
func (s *Costs) repool() {
	s.pool.mu.Lock()
	defer s.pool.mu.Unlock()
	tok, req := s.pool.tokBuf[:0], s.pool.reqBuf[:0]
	add := func(e *endpointCost) {
		if e.samples.Load() > 0 {
			tok, req = append(tok, e.perToken.mean.Load()), append(req, e.perRequest.mean.Load())
		}
	}
	if s.members != nil {
		for _, e := range s.members {
			add(e)
		}
	} else {
		s.eps.mu.RLock()
		for _, e := range s.eps.eps {
			add(e)
		}
		s.eps.mu.RUnlock()
	}
	s.pool.tokBuf, s.pool.reqBuf = tok, req
	if len(tok) == 0 {
		return
	}
	s.pool.tok.Store(median(tok))
	s.pool.req.Store(median(req))
}

// pooledCost is the cost an endpoint is priced at: the pool, plus the part
// of the endpoint's own difference from it beyond PoolZ standard errors of
// its EWMA at rate; the pool alone before the endpoint's first sample.
func pooledCost(own *learnedCost, pool *atomic.Int64, samples int64, rate float64) time.Duration {
	p := float64(pool.Load())
	if samples == 0 || !(rate > 0) {
		return time.Duration(p)
	}
	se := math.Sqrt(math.Float64frombits(own.dev2.Load()) * rate / (2 - rate))
	d, t := float64(own.mean.Load())-p, PoolZ*se
	switch {
	case d > t:
		p += d - t
	case d < -t:
		p += d + t
	}
	return time.Duration(math.Round(p))
}
