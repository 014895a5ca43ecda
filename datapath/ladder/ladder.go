package ladder

import (
	"sync/atomic"

	"github.com/infergate/infergate/datapath/pick"
	"github.com/infergate/infergate/spec"
)

// Candidate is one usable endpoint of a role; its Load is the snapshot the
// whole decision compares.
type Candidate = pick.Candidate

// Facts are what the tiers may know about a request.
type Facts = pick.Facts

// Tier names as they appear in metrics and explanations.
const (
	TierSession = "tier0_session"
	// TierRendezvous places a request Tier 0 did not pin on its key's
	// rendezvous winner (replicated gateways only, see pick/hrw.go).
	TierRendezvous = "rendezvous"
	TierPrefix     = "tier1_prefix"
	TierKVExact    = "tier1_5_kv_exact"
	TierLoad       = "tier2_load"
	TierDecode     = "decode"
	TierFallback   = "role0_fallback"
)

// Fall-through reasons shared by tiers.
const (
	ReasonNoKey      = "no_key"
	ReasonMiss       = "miss"
	ReasonExcluded   = "pinned_endpoint_excluded"
	ReasonBelowThres = "below_threshold"
	ReasonLoadGuard  = "load_guard"
	ReasonEmpty      = "empty"
	ReasonUntrusted  = "untrusted"
	ReasonNotChosen  = pick.ReasonNotChosen
)

// PrefillTier is one rung of the ladder for the prefill choice: a
// pick.Picker whose Name is the tier label of metrics.
type PrefillTier = pick.Picker

// DryPicker is a tier whose Pick has side effects; the ladder calls DryPick
// during Explain so explaining a request never moves a counter.
type DryPicker = pick.DryPicker

// Observer is told which prefill a request finally went to, whichever tier
// chose it (Tier 1 learns prefixes this way).
type Observer = pick.Observer

// Step is one tier's outcome for one request.
type Step = pick.Step

// Trace is the full story of one decision: what operators read when affinity
// "doesn't work", and what metrics count.
type Trace struct {
	Steps   []Step
	Prefill Candidate
	Decode  Candidate
	// PrefillRank is the data-parallel rank of Prefill holding the
	// longest run of the prompt's KV blocks (Tier 1.5's scores);
	// HasPrefillRank is false when the request was not scored or the
	// prefill holds none of it. An engine keeps one cache per rank, so the
	// prefill leg is sent to this rank.
	PrefillRank    int
	HasPrefillRank bool
	// Placed is the cost model's booking of the prefill (nil without
	// one); the caller reports when the prefill is done (Placed.Done).
	Placed *pick.Placed
}

// Ladder runs the tiers for one compiled P/D rule. It is safe for concurrent
// use; the session table is its only mutable state.
type Ladder struct {
	sessions *Sessions // nil disables Tier 0
	tiers    []PrefillTier
	rr       atomic.Uint64 // tie-break cursor for Tier 2
	// rrDecode is decode's own cursor: sharing rr with Tier 2 made a 2P2D
	// pool alternate in lockstep (prefill always even, decode always odd
	// ticks), pairing the same two endpoints forever.
	rrDecode atomic.Uint64
	// replicated makes the choices replica-consistent (pick/hrw.go): new
	// sessions go to their rendezvous winner and exact load ties are broken
	// by the request's rendezvous key instead of rotation.
	replicated bool
	// prefillPolicy and decodePolicy choose a leg no affinity tier chose
	// (policy.go); "" is least load.
	prefillPolicy, decodePolicy spec.Policy
	// costs, when set, prices every rung (tier_cost.go): the rendezvous
	// guard and Tier 2 compare estimated times to first token instead of
	// in-flight counts, and each placement is charged to its prefill.
	costs *pick.Costs
	// chain is what runs after Tier 0, in order: the rendezvous rung
	// (replicated only), the pluggable tiers, and Tier 2, which always
	// chooses. Built by New and Replicated, read-only afterwards.
	chain []pick.Picker
}

// New builds a ladder. sessions may be nil; tiers run in the given order
// between Tier 0 and Tier 2.
func New(sessions *Sessions, tiers ...PrefillTier) *Ladder {
	l := &Ladder{sessions: sessions, tiers: tiers}
	l.chain = l.buildChain()
	return l
}

// Replicated makes l's choices agree across gateway replicas that share no
// state (see pick/hrw.go); a single gateway keeps the rotation it has today.
func (l *Ladder) Replicated() *Ladder {
	l.replicated = true
	l.chain = l.buildChain()
	return l
}

// WithCosts makes every rung of l compare the cost model's estimates
// (tier_cost.go) instead of in-flight counts; nil keeps the counts.
func (l *Ladder) WithCosts(costs *pick.Costs) *Ladder {
	l.costs = costs
	l.chain = l.buildChain()
	return l
}

func (l *Ladder) buildChain() []pick.Picker {
	chain := make([]pick.Picker, 0, len(l.tiers)+2)
	if l.replicated {
		chain = append(chain, rendezvousTier{costs: l.costs})
	}
	chain = append(chain, l.tiers...)
	return append(chain, loadTier{l})
}

func (l *Ladder) leastLoaded(f *Facts, cands []Candidate, cursor *atomic.Uint64) int {
	if l.replicated {
		return pick.LeastLoadedKeyed(cands, f.Key(), cursor)
	}
	return pick.LeastLoaded(cands, cursor)
}

// SelectPair picks a (prefill, decode) pair from usable candidates. ok is
// false when either list is empty (the caller then tries the role-0 pool or
// answers pd_pool_unavailable).
func (l *Ladder) SelectPair(f *Facts, prefills, decodes []Candidate) (Trace, bool) {
	return l.selectPair(f, prefills, decodes, true)
}

// Explain runs the same decision as SelectPair without side effects: no
// session pin is stored or dropped and no tier learns from it. It answers
// "which tier would pick which endpoint, and why" for operators.
func (l *Ladder) Explain(f *Facts, prefills, decodes []Candidate) (Trace, bool) {
	return l.selectPair(f, prefills, decodes, false)
}

func (l *Ladder) selectPair(f *Facts, prefills, decodes []Candidate, commit bool) (Trace, bool) {
	var tr Trace
	if len(prefills) == 0 || len(decodes) == 0 {
		return tr, false
	}
	pinnedDecode := ""
	prefill, found := l.sessionPrefill(f, prefills, &tr, &pinnedDecode, commit)
	if !found {
		// Tier 2 always chooses, so the chain never falls through.
		idx, _ := pick.First(f, prefills, !commit, &tr.Steps, l.chain...)
		prefill = prefills[idx]
	}
	decode := l.pickDecode(f, pinnedDecode, decodes, &tr)
	tr.Prefill, tr.Decode = prefill, decode
	for _, s := range f.KVHeld {
		if s.Endpoint == prefill.ID && s.Blocks > 0 {
			tr.PrefillRank, tr.HasPrefillRank = s.Rank, true
		}
	}
	if !commit {
		return tr, true
	}
	if l.sessions != nil && f.SessionKey != "" {
		l.sessions.Pin(f.SessionKey, prefill.ID, decode.ID, f.Now)
	}
	for _, t := range l.tiers {
		if o, isObserver := t.(Observer); isObserver {
			o.Observe(f, prefill)
		}
	}
	if l.costs != nil {
		l.costs.Place(f, prefill)
		tr.Placed = f.Placed
	}
	return tr, true
}

// sessionPrefill is Tier 0: a live pin whose prefill is still usable wins.
// A pin whose prefill was excluded is dropped so the request re-chooses.
func (l *Ladder) sessionPrefill(f *Facts, prefills []Candidate, tr *Trace, pinnedDecode *string, commit bool) (Candidate, bool) {
	if l.sessions == nil {
		return Candidate{}, false
	}
	if f.SessionKey == "" {
		tr.Steps = append(tr.Steps, Step{Tier: TierSession, Reason: ReasonNoKey})
		return Candidate{}, false
	}
	lookup := l.sessions.Lookup
	if !commit {
		lookup = l.sessions.Peek
	}
	pin, ok := lookup(f.SessionKey, f.Now)
	if !ok {
		tr.Steps = append(tr.Steps, Step{Tier: TierSession, Reason: ReasonMiss})
		return Candidate{}, false
	}
	for i := range prefills {
		if c := &prefills[i]; c.ID == pin.Prefill {
			*pinnedDecode = pin.Decode
			tr.Steps = append(tr.Steps, Step{Tier: TierSession, Hit: true, Choice: c.ID})
			return *c, true
		}
	}
	if commit {
		l.sessions.Drop(f.SessionKey)
	}
	tr.Steps = append(tr.Steps, Step{Tier: TierSession, Reason: ReasonExcluded})
	return Candidate{}, false
}

// rendezvousTier runs on replicated gateways after a Tier 0 miss: the
// request goes to its key's rendezvous winner (session key, else prompt
// head), so every replica sends one conversation, and one shared prefix, to
// the same prefill with no shared state. When this replica sees the winner
// loaded more than the guard above the least loaded (with a cost model:
// estimated slower, holding the prompt, than the cheapest cold candidate),
// the other tiers choose.
type rendezvousTier struct{ costs *pick.Costs }

func (rendezvousTier) Name() pick.Name { return TierRendezvous }

func (t rendezvousTier) Pick(f *Facts, prefills []Candidate) (int, string, bool) {
	key := f.Key()
	if key == 0 {
		return -1, ReasonNoKey, false
	}
	i := pick.Rendezvous(prefills, key)
	if t.costs != nil {
		if affinityCostTrips(t.costs, f, prefills, i, promptTokens(f)) {
			return -1, ReasonLoadGuard, false
		}
		return i, "", true
	}
	if pick.LoadGuardTrips(prefills[i].Load, pick.MinLoad(prefills), pick.DefaultSessionGuard) {
		return -1, ReasonLoadGuard, false
	}
	return i, "", true
}

// loadTier is Tier 2: the least loaded prefill (with a cost model: the
// cheapest estimate); exact ties rotate (or, on replicated gateways, go to
// the request's rendezvous winner among them).
type loadTier struct{ l *Ladder }

func (loadTier) Name() pick.Name { return TierLoad }

func (t loadTier) Pick(f *Facts, prefills []Candidate) (int, string, bool) {
	switch t.l.prefillPolicy {
	case spec.PolicyRoundRobin, spec.PolicyPowerOfTwo: // the rule asked not to weigh load finely
		i, _ := t.l.byPolicy(f, prefills, t.l.prefillPolicy, &t.l.rr) // policy.go
		return i, "", true
	}
	if c := t.l.costs; c != nil {
		key := uint64(0)
		if t.l.replicated {
			key = f.Key()
		}
		return costLoad(c, f, prefills, key, &t.l.rr), "", true
	}
	return t.l.leastLoaded(f, prefills, &t.l.rr), "", true
}

// pickDecode keeps the session's decode when it is still usable, else takes
// the least loaded one.
func (l *Ladder) pickDecode(f *Facts, pinned string, decodes []Candidate, tr *Trace) Candidate {
	if pinned != "" {
		for i := range decodes {
			if c := &decodes[i]; c.ID == pinned {
				tr.Steps = append(tr.Steps, Step{Tier: TierDecode, Hit: true, Choice: c.ID, Reason: "pinned"})
				return *c
			}
		}
	}
	i, reason := l.byPolicy(f, decodes, l.decodePolicy, &l.rrDecode)
	c := decodes[i]
	tr.Steps = append(tr.Steps, Step{Tier: TierDecode, Hit: true, Choice: c.ID, Reason: reason})
	return c
}
