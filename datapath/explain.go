package datapath

import (
	"context"
	"net/http"
	"time"

	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/datapath/chwbl"
	"github.com/infergate/infergate/datapath/ladder"
	"github.com/infergate/infergate/datapath/pick"
	"github.com/infergate/infergate/spec"
)

// Explain reports how the rule with key k would route a request with this
// path, header and body, without routing it. ctx bounds any work a tier
// does to decide (Tier 1.5 may ask an engine to tokenise). An unknown key
// is a 404 *apierror.Error.
func (rt *Runtime) Explain(ctx context.Context, k spec.Key, path string, header http.Header, body []byte) (spec.Explanation, error) {
	rt.mu.Lock()
	rs := rt.rules[k]
	rt.mu.Unlock()
	if rs == nil {
		return spec.Explanation{}, apierror.New(http.StatusNotFound, apierror.CodeRuleNotFound, "", "", "no rule with key "+k.String()+" is served")
	}
	if header == nil {
		header = http.Header{}
	}
	c := rs.cur.Load()
	e := spec.Explanation{Rule: c.label, Engine: string(c.rule.Engine), PD: c.rule.PD != nil, Selector: c.rule.Selector.String()}
	var now int64
	wall := time.Now()
	for i, se := range c.rule.Endpoints {
		ep := c.eps[i]
		e.Candidates = append(e.Candidates, spec.ExplainEntry{
			ID: se.ID, Role: se.Role.String(), Weight: se.Weight,
			Health: healthName(ep.health.Load()), Breaker: breakerName(ep.br.state.Load()),
			Load: ep.active.Load(), Usable: c.usable(i, 0, &now), Engine: ep.engineStatus(wall).Summary(),
			Window: c.windowStatus(i).Summary(),
		})
	}
	e.Queue = c.queueStatus(wall)
	f := pick.Facts{Ctx: ctx, Path: path, Body: body, Now: time.Now()}
	top := ladder.ScanFacts(&f)
	f.Model, f.SessionKey = requestIdentity(header, top)
	e.HasSessionKey = f.SessionKey != ""
	if c.rule.PD == nil {
		rt.explainSingle(c, &f, &e)
		return e, nil
	}
	p := c.pd
	// Explain has no method: a body means POST. Paths the rule relays to one
	// endpoint (side paths, APIs without transfer) or refuses are "relay".
	method := http.MethodGet
	if len(body) > 0 {
		method = http.MethodPost
	}
	if len(body) == 0 || c.pdRoute(method, path).kind != pdSequence {
		e.Outcome = spec.ExplainRelay
		return e, nil
	}
	if p.prefix != nil {
		f.PromptKey = top.AppendPromptKey(nil, path, rt.opts.PrefixIndex.MaxKeyBytes)
	}
	prefills, decodes := c.pdCandidates(0)
	if p.dialect != nil {
		if tr, ok := p.ladder.Explain(&f, prefills, decodes); ok {
			for _, s := range tr.Steps {
				e.Steps = append(e.Steps, spec.ExplainStep{Tier: s.Tier, Hit: s.Hit, Reason: s.Reason, Choice: s.Choice})
			}
			e.Outcome, e.Prefill, e.Decode = spec.ExplainPair, tr.Prefill.ID, tr.Decode.ID
		}
		if len(prefills) > 0 {
			e.Estimates = explainEstimates(p.costs, &f, prefills)
			if p.prefix != nil {
				px := p.prefix.Explain(&f, prefills)
				e.Prefix = &px
			}
			if p.kvTier != nil {
				_, reason, _, scores := p.kvTier.Explain(&f, prefills)
				e.KVScores, e.KVReason = scores, reason
			}
		}
	}
	if e.Outcome == "" {
		if p.hasRole0 && c.anyUsable(c.roleMask(spec.RoleAny)) {
			e.Outcome = spec.ExplainFallback
		} else {
			e.Outcome = spec.ExplainUnavailable
		}
	}
	return e, nil
}

// explainSingle fills a single-pool rule's view: the KV-exact scores
// (mode 3) and, for CHWBL with a prefix or session key, the ring's choice.
// Other selectors depend on a shared cursor, so no choice is predicted.
func (rt *Runtime) explainSingle(c *compiled, f *pick.Facts, e *spec.Explanation) {
	e.Outcome = spec.ExplainSingle
	var now int64
	if c.kv != nil && c.kv.Mode() == 3 && len(f.Body) > 0 {
		cands := c.kvCandidates(0, &now)
		idx, reason, ok, scores := c.kv.Explain(f, cands)
		e.KVScores, e.KVReason = scores, reason
		step := spec.ExplainStep{Tier: ladder.TierKVExact, Hit: ok, Reason: reason}
		if ok && idx >= 0 && idx < len(cands) {
			step.Choice = cands[idx].ID
			e.Endpoint = step.Choice
		}
		e.Steps = append(e.Steps, step)
		if ok {
			return
		}
	}
	if c.ring == nil {
		e.Note = "selector " + c.rule.Selector.String() + " rotates a shared cursor; its choice is not predicted"
		return
	}
	level := c.chwblLevel()
	key := ladder.AppendPromptKey(nil, f.Path, f.Body, chwbl.PrefixLevelBytes(level))
	if len(key) == 0 && f.SessionKey == "" {
		e.Note = "no prompt or session key: CHWBL would round-robin"
		return
	}
	var pf pick.PoolFacts
	c.ringFacts(&pf, key, level, f.Model, f.SessionKey) // keyed: no cursor moves
	i, ok := c.pool.RingChoice(c.ring, &pf)
	step := spec.ExplainStep{Tier: "chwbl_" + pf.RingSrc.String(), Hit: ok}
	if ok {
		step.Choice = c.rule.Endpoints[i].ID
		e.Endpoint = step.Choice
	}
	e.Steps = append(e.Steps, step)
}

// explainEstimates prices every candidate cold with the gateway's cost
// model (nil without one): what the load rung compares for a request no
// candidate holds (pick.Estimate.Total).
func explainEstimates(costs *pick.Costs, f *pick.Facts, cands []pick.Candidate) []spec.CandidateEstimate {
	if costs == nil {
		return nil
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	tokens := ladder.PromptTokens(f)
	out := make([]spec.CandidateEstimate, len(cands))
	for i := range cands {
		e := costs.Estimate(&cands[i], f.Now, tokens, 0)
		out[i] = spec.CandidateEstimate{ID: cands[i].ID, EstimateMs: ms(e.Total()), QueueMs: ms(e.Queue),
			BacklogMs: ms(e.Backlog), ChargedMs: ms(e.Charged), PrefillMs: ms(e.Prefill), SaturationMs: ms(e.Saturation)}
	}
	return out
}
