package datapath

import (
	"context"
	"net/http"
	"time"

	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/datapath/chwbl"
	"github.com/infergate/infergate/datapath/ladder"
	"github.com/infergate/infergate/spec"
)

// Outcomes of an Explanation.
const (
	ExplainPair        = "pair"                // a (prefill, decode) pair would serve it
	ExplainFallback    = "role0_fallback"      // a role-0 endpoint would serve it unsplit
	ExplainUnavailable = "pd_pool_unavailable" // 503
	ExplainRelay       = "relay"               // body-less P/D request: plain relay to a prefill
	ExplainSingle      = "single"              // single-pool rule
)

// Explanation is a dry run of routing one request: what each tier would
// decide and why, with the candidates' state. It has no side effects (no
// session pinned or slid, nothing learned, no breaker slot taken).
type Explanation struct {
	Rule     string `json:"rule"`
	Engine   string `json:"engine,omitempty"`
	PD       bool   `json:"pd"`
	Selector string `json:"selector"`
	Outcome  string `json:"outcome"`
	// HasSessionKey: the request carries a Tier 0 key (X-Conversation-Id
	// or body "user"); the key itself is not echoed.
	HasSessionKey bool           `json:"has_session_key"`
	Steps         []ExplainStep  `json:"steps"`
	Prefill       string         `json:"prefill,omitempty"`
	Decode        string         `json:"decode,omitempty"`
	Endpoint      string         `json:"endpoint,omitempty"` // single pool (CHWBL, KV mode 3) when predictable
	Candidates    []ExplainEntry `json:"candidates"`
	// Prefix is Tier 1's view (cache-aware P/D rules).
	Prefix *ladder.PrefixExplain `json:"prefix,omitempty"`
	// KVScores is Tier 1.5's per-candidate view (kvExactMode 1 and 3).
	KVScores []ladder.CandidateScore `json:"kv_scores,omitempty"`
	KVReason string                  `json:"kv_reason,omitempty"`
	Note     string                  `json:"note,omitempty"`
}

// ExplainStep is one tier's verdict.
type ExplainStep struct {
	Tier   string `json:"tier"`
	Hit    bool   `json:"hit"`
	Reason string `json:"reason,omitempty"`
	Choice string `json:"choice,omitempty"`
}

// ExplainEntry is one endpoint as routing sees it now.
type ExplainEntry struct {
	ID      string `json:"id"`
	Role    string `json:"role"`
	Weight  int    `json:"weight"`
	Health  string `json:"health"`
	Breaker string `json:"breaker"`
	Load    int64  `json:"load"`
	Usable  bool   `json:"usable"`
}

// Explain reports how the rule with key k would route a request with this
// path, header and body, without routing it. ctx bounds any work a tier
// does to decide (Tier 1.5 may ask an engine to tokenise). An unknown key
// is a 404 *apierror.Error.
func (rt *Runtime) Explain(ctx context.Context, k spec.Key, path string, header http.Header, body []byte) (Explanation, error) {
	rt.mu.Lock()
	rs := rt.rules[k]
	rt.mu.Unlock()
	if rs == nil {
		return Explanation{}, apierror.New(http.StatusNotFound, apierror.CodeRuleNotFound, "", "", "no rule with key "+k.String()+" is served")
	}
	if header == nil {
		header = http.Header{}
	}
	c := rs.cur.Load()
	e := Explanation{Rule: c.label, Engine: string(c.rule.Engine), PD: c.rule.PD != nil, Selector: c.rule.Selector.String()}
	var now int64
	for i, se := range c.rule.Endpoints {
		ep := c.eps[i]
		e.Candidates = append(e.Candidates, ExplainEntry{
			ID: se.ID, Role: se.Role.String(), Weight: se.Weight,
			Health: healthName(ep.health.Load()), Breaker: breakerName(ep.br.state.Load()),
			Load: ep.active.Load(), Usable: c.usable(i, 0, &now),
		})
	}
	f := ladder.Facts{Ctx: ctx, Path: path, Body: body, Now: time.Now()}
	top := ladder.ScanBody(body)
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
		e.Outcome = ExplainRelay
		return e, nil
	}
	if p.prefix != nil {
		f.PromptKey = top.AppendPromptKey(nil, path, rt.opts.PrefixIndex.MaxKeyBytes)
	}
	prefills, decodes := c.pdCandidates(0)
	if p.dialect != nil {
		if tr, ok := p.ladder.Explain(&f, prefills, decodes); ok {
			for _, s := range tr.Steps {
				e.Steps = append(e.Steps, ExplainStep{Tier: s.Tier, Hit: s.Hit, Reason: s.Reason, Choice: s.Choice})
			}
			e.Outcome, e.Prefill, e.Decode = ExplainPair, tr.Prefill.ID, tr.Decode.ID
		}
		if len(prefills) > 0 {
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
			e.Outcome = ExplainFallback
		} else {
			e.Outcome = ExplainUnavailable
		}
	}
	return e, nil
}

// explainSingle fills a single-pool rule's view: the KV-exact scores
// (mode 3) and, for CHWBL with a prefix or session key, the ring's choice.
// Other selectors depend on a shared cursor, so no choice is predicted.
func (rt *Runtime) explainSingle(c *compiled, f *ladder.Facts, e *Explanation) {
	e.Outcome = ExplainSingle
	var now int64
	if c.kv != nil && c.kv.Mode() == 3 && len(f.Body) > 0 {
		var cands []ladder.Candidate
		for i, se := range c.rule.Endpoints {
			if !se.Backup && c.usable(i, 0, &now) {
				cands = append(cands, ladder.Candidate{ID: se.ID, Index: i, Load: int(c.eps[i].active.Load())})
			}
		}
		idx, reason, ok, scores := c.kv.Explain(f, cands)
		e.KVScores, e.KVReason = scores, reason
		step := ExplainStep{Tier: ladder.TierKVExact, Hit: ok, Reason: reason}
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
	level := 1
	if c.rule.CHWBL != nil && c.rule.CHWBL.PrefixHashLevel > 0 {
		level = c.rule.CHWBL.PrefixHashLevel
	}
	key := ladder.AppendPromptKey(nil, f.Path, f.Body, chwbl.PrefixLevelBytes(level))
	if len(key) == 0 && f.SessionKey == "" {
		e.Note = "no prompt or session key: CHWBL would round-robin"
		return
	}
	h, src := c.ring.Key(key, level, f.Model, f.SessionKey) // keyed: no cursor moves
	i, _, ok := c.ring.PickDetail(h,
		func(i int) int { return int(c.slots[i].ep.active.Load()) },
		func(i int) bool { return c.usable(i, 0, &now) && !c.slots[i].backup })
	step := ExplainStep{Tier: "chwbl_" + src.String(), Hit: ok}
	if ok {
		step.Choice = c.rule.Endpoints[i].ID
		e.Endpoint = step.Choice
	}
	e.Steps = append(e.Steps, step)
}
