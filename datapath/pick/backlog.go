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
// endpoint from the requests placed while a backlog was charged: the part
// of the observed time to first token that the request's own prefill and
// the queue term do not explain, as a share of the backlog, folded in as
// an exponentially weighted average at the model's LearnRate and kept
// within [0, 1]. The prior is 1 (one after another), so a gateway that
// has seen nothing, or does not learn, prices the backlog as it always did.

// DefaultBacklogShare is the prior share of the charged backlog a
// newcomer waits behind: all of it, as on a compute-bound engine.
const DefaultBacklogShare = 1.0

// backlogSample is the share of the charged backlog that one observed
// time to first token implies: what the request waited beyond its own
// prefill and the queue term, over the backlog it was placed behind,
// within [0, 1]. ok is false when nothing was charged ahead of it.
func backlogSample(est Estimate, ttft time.Duration) (share float64, ok bool) {
	if est.Charged <= 0 {
		return 0, false
	}
	beyond := float64(ttft - est.Prefill - est.Queue)
	return min(max(beyond/float64(est.Charged), 0), 1), true
}

// learnBacklogShare folds one sample into e's share at rate.
func (e *endpointCost) learnBacklogShare(sample, rate float64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	cur := e.backlogShareNow()
	e.backlogShare.Store(math.Float64bits(cur + rate*(sample-cur)))
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
