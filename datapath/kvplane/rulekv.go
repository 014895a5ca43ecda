package kvplane

import (
	"net/netip"
	"time"

	"github.com/infergate/infergate/datapath/ladder"
	"github.com/infergate/infergate/datapath/pick"
	"github.com/infergate/infergate/kvexact"
	"github.com/infergate/infergate/kvexact/tokenize"
	"github.com/infergate/infergate/spec"
)

// RuleKV is one installed rule's KV-exact view: immutable, replaced by the
// next Install; its inventory and event sources live on across compatible
// updates.
type RuleKV struct {
	st     *ruleState
	mode   int
	guard  int
	single *ladder.KVExact
	plane  *Plane
	// costs is the cost state the rule prices with (Plane.CostsFor); nil
	// with the legacy in-flight guards.
	costs *pick.Costs
	// cold chooses a mode-3 request the KV tier passed on (a miss, an
	// untrusted inventory) by the cost estimate when the rule's own mode
	// is least connections; nil keeps the rule's mode.
	cold *ladder.CostLoad
}

func (st *ruleState) view(r *spec.Rule) *RuleKV {
	guard := DefaultSingleLoadGuard
	if r.PD != nil && r.PD.BalanceAbsThreshold > 0 {
		guard = r.PD.BalanceAbsThreshold
	}
	return &RuleKV{st: st, mode: r.KV.Mode, guard: guard}
}

// Mode is the rule's kvExactMode (1 P/D prefill, 3 single pool).
func (r *RuleKV) Mode() int { return r.mode }

// Inventory is the rule's block inventory.
func (r *RuleKV) Inventory() *kvexact.Inventory { return r.st.inv }

// Tokenizer is the rule's tokenizer: in process when the model has a
// --kv-tokenizer, else the engine's /tokenize (cached, coalesced).
func (r *RuleKV) Tokenizer() tokenize.Tokenizer { return r.st.chain }

// SetHealthy tells the rule which endpoints may be asked to tokenise (the
// datapath's healthy, usable endpoints of the eligible role). Without it
// every eligible endpoint is asked in turn.
func (r *RuleKV) SetHealthy(healthy func() []spec.Endpoint) {
	if healthy == nil {
		r.st.healthy.Store(nil)
		return
	}
	r.st.healthy.Store(&healthy)
}

// Tier is Tier 1.5 for the ladder (mode 1): tok nil uses the rule's own
// tokenizer; the load guard is the rule's pd_balance_abs_threshold (0 → 3).
func (r *RuleKV) Tier(tok tokenize.Tokenizer) ladder.PrefillTier {
	return r.tier(tok, r.guard)
}

func (r *RuleKV) tier(tok tokenize.Tokenizer, guard int) *ladder.KVExact {
	if tok == nil {
		tok = r.st.chain
	}
	o := ladder.KVExactOptions{
		Rule:      r.st.name,
		Index:     r.st.inv,
		Tokenizer: tok,
		LoadGuard: guard,
		Costs:     r.costs,
		Pending:   r.st.pending,
		Watchdog:  r.st.watchdog,
		Logger:    r.st.log,
	}
	if r.plane != nil {
		o.Metrics = r.plane.routing()
	}
	return ladder.NewKVExact(o)
}

// Costs is the cost state the rule prices with: the gateway's, pooled over
// the rule's endpoints (Plane.CostsFor); nil with the legacy in-flight
// guards (Options.LegacyLoadGuard).
func (r *RuleKV) Costs() *pick.Costs { return r.costs }

// PickSingle is the same decision (the KV-exact pick.Picker) for a mode-3
// single pool, over a snapshot of its usable primaries: ok=false (with
// the fall-through reason) means the rule's selector keeps its choice.
// by names the picker that chose — the KV-exact tier, or the cost model's
// load placement of a request the tier passed on (reason is then the
// tier's) — so the access line and the span say what really decided.
func (r *RuleKV) PickSingle(f *pick.Facts, cands []pick.Candidate) (idx int, by pick.Name, reason string, ok bool) {
	if len(cands) == 0 {
		return -1, "", ladder.ReasonEmpty, false
	}
	if idx, reason, ok = r.single.Pick(f, cands); ok {
		return idx, r.single.Name(), reason, true
	}
	if r.cold != nil {
		if k, _, placed := r.cold.Pick(f, cands); placed {
			return k, r.cold.Name(), reason, true
		}
	}
	return idx, "", reason, false
}

// NoteWork tells the inventory a mode-3 request f, scored by PickSingle,
// was sent to endpoint; only work that should make the engine publish
// counts (ladder.ExpectsNewBlocks; kvexact.Inventory.NoteWork: work
// without events makes it stale).
// With the cost model the placement is also booked (pick.Costs.Place:
// the endpoint's prefill backlog, f.Placed for the first-token report).
func (r *RuleKV) NoteWork(f *pick.Facts, chosen pick.Candidate) {
	r.single.Observe(f, chosen)
	if c := r.costs; c != nil {
		c.Place(f, chosen)
	}
}

// EndpointDown tells the inventory the endpoint's health went down: its
// blocks are dropped (kvexact.Inventory.EndpointDown).
func (r *RuleKV) EndpointDown(endpoint string) { r.st.inv.EndpointDown(endpoint) }

// Explain returns the Tier 1.5 view of every candidate without counting
// the lookup, for the routing explanation.
func (r *RuleKV) Explain(f *pick.Facts, cands []pick.Candidate) (idx int, reason string, ok bool, scores []spec.CandidateScore) {
	if len(cands) == 0 {
		return -1, ladder.ReasonEmpty, false, nil
	}
	return r.single.Explain(f, cands)
}

// InventoryRow is one (rule, endpoint, rank) line of the inventory API
// (the view lives in spec so the API does not import the datapath).
type InventoryRow = spec.InventoryRow

// ReasonNoEvents marks an eligible endpoint rank nothing was heard from.
const ReasonNoEvents = "no_events"

// ReasonAmbiguousTopic replaces no_events when engines publish on a
// port-less topic kv@<ip>@<model> and several endpoints of the rule have
// that IP: the gateway cannot tell whose events they are.
const ReasonAmbiguousTopic = "ambiguous_topic"

// KVInventory returns one row per eligible (rule, endpoint, rank), rules in
// no particular order, endpoints and ranks sorted.
func (p *Plane) KVInventory() []InventoryRow {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	states := make([]*ruleState, 0, len(p.rules))
	for _, st := range p.rules {
		states = append(states, st)
	}
	type epInfo struct {
		source string
		ranks  int
	}
	infos := make([]map[string]epInfo, len(states))
	order := make([][]string, len(states))
	for i, st := range states {
		infos[i] = map[string]epInfo{}
		ranks := max(st.rule.KV.DPRanks, 1)
		for _, ep := range eligible(st.rule) {
			if s, ok := st.subs[ep.ID]; ok {
				infos[i][ep.ID] = epInfo{source: s.source, ranks: ranks}
				order[i] = append(order[i], ep.ID)
			}
		}
	}
	p.mu.Unlock()
	var rows []InventoryRow
	for i, st := range states {
		seen := map[[2]any]kvexact.RankState{}
		for _, rs := range st.inv.Ranks() {
			seen[[2]any{rs.Endpoint, rs.Rank}] = rs
		}
		for _, id := range order[i] {
			info := infos[i][id]
			var age *float64
			if l := st.lastOf(id).Load(); l != 0 {
				a := st.clock.Now().Sub(time.Unix(0, l)).Seconds()
				age = &a
			}
			for rank := 0; rank < info.ranks; rank++ {
				row := InventoryRow{Rule: st.name, Endpoint: id, Rank: rank, Source: info.source, LastEventAgeSec: age, BlockSize: st.inv.BlockSize()}
				rs, ok := seen[[2]any{id, rank}]
				if !ok {
					row.Reason = ReasonNoEvents
					if ap, err := netip.ParseAddrPort(id); err == nil {
						if _, amb := st.ambiguous.Load(ap.Addr().Unmap()); amb {
							row.Reason = ReasonAmbiguousTopic
						}
					}
					rows = append(rows, row)
					continue
				}
				row.Blocks, row.Connected, row.Trusted, row.Reason = rs.Blocks, rs.Connected, rs.Trusted, rs.Reason
				if rs.HasSeq {
					s := rs.LastSeq
					row.LastSeq = &s
				}
				rows = append(rows, row)
			}
		}
	}
	return rows
}
