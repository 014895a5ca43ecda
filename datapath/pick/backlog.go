package pick

import (
	"math"
	"time"
)

// Backlog share. The backlog clock (Costs.Charge) adds up the prefills
// this gateway sent an endpoint as if the engine computed them one after
// another. That is right for an engine whose prefill is compute-bound and
// shares one per-step token budget (vLLM's chunked prefill, test/enginesim):
// a newcomer's first token waits for the prefill tokens scheduled ahead of
// it. It is wrong for an engine that prices each prefill on its own tokens
// whatever else is prefilling (llm-d-inference-sim: a request's time to
// first token grows with the running batch, not with the prefills beside
// it). There, a cache holder that just took another conversation's cold
// first turn looks half a second dearer than it is, a cold engine wins,
// and a follow-up turn recomputes its whole history elsewhere.
//
// Which engine the fleet runs is not configured anywhere, so the share of
// the charged backlog a newcomer really waits behind is learned per
// endpoint from the requests placed while a backlog was charged. Each one
// waited some part of it: what its observed time to first token holds
// beyond its own prefill and the queue term, within [0, charged]. The share
// is the ratio of the waits to the backlogs, both summed with older samples
// discounted by the model's LearnRate each (a least-squares fit of wait =
// share × backlog that forgets), so a sample behind a long backlog says
// more than one behind a few milliseconds of it, whose wait is mostly
// noise. The prior, 1 (one after another), enters as one sample behind
// backlogPriorWeight of backlog: a gateway that has seen nothing, or does
// not learn, prices the backlog as it always did, and a handful of
// answers outweighs the guess.

// DefaultBacklogShare is the prior share of the charged backlog a
// newcomer waits behind: all of it, as on a compute-bound engine.
const DefaultBacklogShare = 1.0

// backlogPriorWeight is the backlog the prior counts as having seen: about
// one cold 1,000-token prefill at the default costs.
const backlogPriorWeight = 250 * time.Millisecond

// backlogFit is an endpoint's discounted sums of the waits and the
// backlogs of the requests placed behind a charged backlog (nanoseconds),
// guarded by endpointCost.mu.
type backlogFit struct{ waited, charged float64 }

func newBacklogFit() backlogFit {
	w := float64(backlogPriorWeight)
	return backlogFit{waited: DefaultBacklogShare * w, charged: w}
}

// add folds in one request placed behind charged of backlog that waited
// waited of it, discounting the earlier samples by rate, and returns the
// share.
func (b *backlogFit) add(waited, charged time.Duration, rate float64) float64 {
	w := min(max(waited, 0), charged)
	b.waited = (1-rate)*b.waited + float64(w)
	b.charged = (1-rate)*b.charged + float64(charged)
	return b.waited / b.charged
}

// backlogWaited is what an observed time to first token says the request
// waited behind the backlog it was placed with: the part its own prefill
// and the queue term do not explain. ok is false when nothing was charged
// ahead of it.
func backlogWaited(est Estimate, ttft time.Duration) (waited time.Duration, ok bool) {
	if est.Charged <= 0 {
		return 0, false
	}
	return ttft - est.Prefill - est.Queue, true
}

// learnBacklogShare folds one request that waited waited of a charged
// backlog into e's share at rate.
func (e *endpointCost) learnBacklogShare(waited, charged time.Duration, rate float64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.backlogShare.Store(math.Float64bits(e.backlog.add(waited, charged, rate)))
}

// backlogShareNow is the endpoint's learned share.
func (e *endpointCost) backlogShareNow() float64 {
	return math.Float64frombits(e.backlogShare.Load())
}

// backlogWait is the wait a charged backlog adds for a newcomer on e.
func (e *endpointCost) backlogWait(charged time.Duration) time.Duration {
	return time.Duration(math.Round(float64(charged) * e.backlogShareNow()))
}

// BacklogShare reports endpoint id's learned backlog share
// (DefaultBacklogShare before any sample).
func (s *Costs) BacklogShare(id string) float64 { return s.endpoint(id).backlogShareNow() }
