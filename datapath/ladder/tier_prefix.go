package ladder

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/infergate/infergate/datapath/pick"
	"github.com/infergate/infergate/radix"
	"github.com/infergate/infergate/spec"
)

// maxCandidateIDs sizes the stack buffer of candidate IDs handed to the
// index; a rule has at most 32 endpoints, so Pick does not allocate.
const maxCandidateIDs = 32

// PrefixOptions configures Tier 1 for one P/D rule.
type PrefixOptions struct {
	// Index holds the rule's prefixes (one per rule, budgeted by the
	// daemon's PrefixIndexBudgetBytes). Required.
	Index *radix.Index
	// Threshold is pd_cache_threshold in percent: a match hits when
	// matched bytes ≥ Threshold% of the prompt key (exactly at the
	// threshold hits). 0 accepts any shared boundary.
	Threshold int
	// BalanceAbs is pd_balance_abs_threshold: the affinity choice is
	// skipped when its load exceeds the least loaded candidate's by more
	// than this. Negative disables the guard.
	BalanceAbs int
	// Costs, when set, replaces the BalanceAbs guard: the prefix's holder
	// keeps the request while its estimated time to first token with the
	// matched prefix cached is below every other candidate's cold
	// (tier_cost.go).
	Costs *pick.Costs
	// OnLookup, if set, is called once per Pick with the match rate (0 on a
	// miss); the datapath feeds metrics.Radix.MatchRate with it so the tier
	// stays metric-agnostic.
	OnLookup func(rate float64)
	// Endpoints, if set, are every prefill endpoint ID of the rule. A miss
	// is then reported as pinned_endpoint_excluded when the prefix's owner
	// is one of them but not a candidate now (down, breaker open,
	// draining), from the first request on; without it the tier only knows
	// the endpoints it has observed since it was built.
	Endpoints []string
}

// PrefixTier is Tier 1: send a prompt to the prefill endpoint that last
// served the longest prefix of it, so the engine's prefix cache is reused,
// unless that endpoint is clearly busier than the least loaded one. It
// learns from Observe (the final choice of every request, whichever tier
// made it) and forgets an endpoint on Forget.
type PrefixTier struct {
	o PrefixOptions
	// known are the endpoints the index has learned; a miss is re-checked
	// against them to tell "excluded owner" from "nothing shared". Copy on
	// write: read on every miss, written only when a new endpoint is seen.
	known   atomic.Pointer[[]string]
	knownMu sync.Mutex
}

// NewPrefixTier builds Tier 1 over o.Index.
func NewPrefixTier(o PrefixOptions) *PrefixTier {
	t := &PrefixTier{o: o}
	known := slices.Clone(o.Endpoints)
	if known == nil {
		known = []string{}
	}
	t.known.Store(&known)
	return t
}

// Index is the tier's prefix index (for gauges: metrics.Radix.TrackIndex).
func (t *PrefixTier) Index() *radix.Index { return t.o.Index }

// Name implements PrefillTier.
func (t *PrefixTier) Name() pick.Name { return TierPrefix }

// Pick implements PrefillTier. Its only side effect is OnLookup.
func (t *PrefixTier) Pick(f *Facts, cands []Candidate) (int, string, bool) {
	e, idx := t.explain(f, cands)
	if t.o.OnLookup != nil && len(f.PromptKey) > 0 {
		rate := e.Rate
		if idx < 0 {
			rate = 0
		}
		t.o.OnLookup(rate)
	}
	return idx, e.Reason, e.Hit
}

// DryPick is Pick without OnLookup, for a ladder dry run (the routing
// explanation) that must not feed the match-rate histogram.
func (t *PrefixTier) DryPick(f *Facts, cands []Candidate) (int, string, bool) {
	e, idx := t.explain(f, cands)
	return idx, e.Reason, e.Hit
}

// Explain runs Pick's decision without side effects and reports it in full.
func (t *PrefixTier) Explain(f *Facts, cands []Candidate) spec.PrefixExplain {
	e, _ := t.explain(f, cands)
	return e
}

// explain is the whole tier: the view, and the index in cands of
// e.Endpoint (-1 if it is not a candidate).
func (t *PrefixTier) explain(f *Facts, cands []Candidate) (spec.PrefixExplain, int) {
	e := spec.PrefixExplain{Threshold: t.o.Threshold, BalanceAbs: t.o.BalanceAbs, KeyBytes: len(f.PromptKey)}
	key := f.PromptKey
	if len(key) == 0 {
		e.Reason = ReasonNoKey
		return e, -1
	}
	ix := t.o.Index
	if ix.Entries() == 0 {
		e.Reason = ReasonEmpty
		return e, -1
	}
	var buf [maxCandidateIDs]string
	ids := buf[:0]
	for i := range cands {
		c := &cands[i]
		ids = append(ids, c.ID)
	}
	ep, matched, ok := ix.Match(key, ids)
	if !ok {
		return t.explainMiss(key, cands, e), -1
	}
	e.Endpoint, e.MatchedBytes, e.Rate = ep, matched, ix.MatchRate(key, matched)
	e.KeyBytes = clippedLen(e.Rate, matched, len(key))
	idx := -1
	for i := range cands {
		c := &cands[i]
		if c.ID == ep {
			idx, e.Load = i, c.Load
			break
		}
	}
	e.MinLoad = minLoad(cands)
	switch {
	case idx < 0: // Match only returns candidates; defensive
		e.Reason = ReasonNotChosen
	case !AboveThreshold(e.MatchedBytes, e.KeyBytes, t.o.Threshold):
		e.Reason = ReasonBelowThres
	case t.o.Costs != nil:
		if affinityCostTrips(t.o.Costs, f, cands, idx, matched/BytesPerToken) {
			e.Reason = ReasonLoadGuard
		} else {
			e.Hit = true
		}
	case LoadGuardTrips(e.Load, e.MinLoad, t.o.BalanceAbs):
		e.Reason = ReasonLoadGuard
	default:
		e.Hit = true
	}
	return e, idx
}

// explainMiss tells apart "an endpoint that is not a candidate now (down,
// breaker open, draining) owns this prefix" from "nothing shared".
func (t *PrefixTier) explainMiss(key []byte, cands []Candidate, e spec.PrefixExplain) spec.PrefixExplain {
	e.Reason = ReasonMiss // nothing shared with any candidate
	ep, matched, ok := t.o.Index.Match(key, *t.known.Load())
	if !ok {
		return e
	}
	for i := range cands {
		c := &cands[i]
		if c.ID == ep {
			return e // learned between the two lookups; report a plain miss
		}
	}
	rate := t.o.Index.MatchRate(key, matched)
	if AboveThreshold(matched, clippedLen(rate, matched, len(key)), t.o.Threshold) {
		e.Reason = ReasonExcluded
		e.Endpoint, e.MatchedBytes, e.Rate = ep, matched, rate
		e.KeyBytes = clippedLen(rate, matched, len(key))
	}
	return e
}

// Observe implements Observer: the request's prompt now belongs to the
// prefill it finally went to, whichever tier chose it.
func (t *PrefixTier) Observe(f *Facts, chosen Candidate) {
	if len(f.PromptKey) == 0 || chosen.ID == "" {
		return
	}
	t.o.Index.Insert(f.PromptKey, chosen.ID)
	t.learn(chosen.ID)
}

// Forget drops every prefix owned by endpoint: the datapath calls it when
// the endpoint goes down, its breaker opens or a rule update removes it, so
// affinity does not wait for LRU to move work off a dead engine's (now cold)
// cache.
func (t *PrefixTier) Forget(endpoint string) int {
	t.knownMu.Lock()
	cur := *t.known.Load()
	if i := slices.Index(cur, endpoint); i >= 0 {
		next := slices.Delete(slices.Clone(cur), i, i+1)
		t.known.Store(&next)
	}
	t.knownMu.Unlock()
	return t.o.Index.RemoveEndpoint(endpoint)
}

func (t *PrefixTier) learn(id string) {
	if slices.Contains(*t.known.Load(), id) {
		return
	}
	t.knownMu.Lock()
	defer t.knownMu.Unlock()
	cur := *t.known.Load()
	if slices.Contains(cur, id) {
		return
	}
	next := append(slices.Clone(cur), id)
	t.known.Store(&next)
}

// AboveThreshold is the Tier 1 hit rule: matched/keyBytes ≥ percent/100,
// in integers so that exactly at the threshold hits. An empty key never
// hits; percent ≤ 0 accepts any match of at least one byte.
func AboveThreshold(matched, keyBytes, percent int) bool {
	if keyBytes <= 0 || matched <= 0 {
		return false
	}
	return matched*100 >= percent*keyBytes
}

// LoadGuardTrips is the per-candidate load guard (pick.LoadGuardTrips).
func LoadGuardTrips(load, minLoad, balanceAbs int) bool {
	return pick.LoadGuardTrips(load, minLoad, balanceAbs)
}

func minLoad(cands []Candidate) int { return pick.MinLoad(cands) }

// clippedLen recovers the key length the index measured the rate against
// (the key clipped to its MaxKeyBytes) from MatchRate's answer.
func clippedLen(rate float64, matched, keyLen int) int {
	if rate <= 0 {
		return keyLen
	}
	n := int(float64(matched)/rate + 0.5)
	if n <= 0 || n > keyLen {
		return keyLen
	}
	return n
}
