package ladder

import (
	"sync/atomic"

	"github.com/infergate/infergate/datapath/pick"
)

// Cost-based guards and load choice. With a cost model (pick.Costs) every
// rung weighs the same thing, the estimated time to first token: the
// prefix and rendezvous rungs keep their affinity only while the holder's
// estimate (its queue and backlog, with the prompt cached) stays below
// the cheapest cold candidate's, and the load rung takes the cheapest
// candidate instead of the one with the fewest requests in flight. A cache
// hit on an engine with a 40-request queue then loses to an idle cold
// engine, and a prompt that misses every cache goes where its prefill
// starts soonest, not behind another miss's prefill.

// BytesPerToken converts a prompt key's length to tokens where the prompt
// was not tokenised (the prefix and rendezvous rungs): about four bytes of
// English text per BPE token.
const BytesPerToken = 4

// PromptTokens is the request's prompt length for the estimate: the
// tokenised length when a tier knows it, else the prompt key's length.
func PromptTokens(f *Facts) int { return promptTokens(f) }

func promptTokens(f *Facts) int {
	if f.PromptTokens > 0 {
		return f.PromptTokens
	}
	return len(f.PromptKey) / BytesPerToken
}

// affinityCostTrips is the cost guard of an affinity rung: the chosen
// candidate at idx, assumed to hold cachedTokens of the prompt, is given
// up when some other candidate, holding nothing, is estimated to answer
// sooner.
func affinityCostTrips(costs *pick.Costs, f *Facts, cands []Candidate, idx, cachedTokens int) bool {
	now := f.Clock()
	tokens := promptTokens(f)
	held := costs.Estimate(&cands[idx], now, tokens, cachedTokens).Total()
	for i := range cands {
		if i != idx && costs.Estimate(&cands[i], now, tokens, 0).Total() < held {
			return true
		}
	}
	return false
}

// costLoad is the load rung priced by the cost model: the cheapest
// candidate, reusing the prices an earlier rung recorded for this request
// (KV-exact prices with each candidate's cached tokens), else pricing
// every candidate cold. Exact ties rotate (or, keyed, go to the request's
// rendezvous winner among them), so idle engines share cold work.
func costLoad(costs *pick.Costs, f *Facts, cands []Candidate, key uint64, cursor *atomic.Uint64) int {
	prices := f.Priced
	if !pricedFor(prices, cands) {
		prices = costs.Price(f, cands, promptTokens(f), nil)
	}
	return pick.CheapestRotating(prices, cands, key, cursor)
}

// pricedFor reports whether prices are one per candidate of cands.
func pricedFor(prices []pick.Priced, cands []Candidate) bool {
	if len(prices) != len(cands) {
		return false
	}
	for i := range cands {
		if prices[i].ID != cands[i].ID {
			return false
		}
	}
	return true
}

// CostLoad is the cost-priced load rung as a pick.Picker, for choices
// outside the ladder (a single pool's KV-exact fall-through). It always
// chooses.
type CostLoad struct {
	costs  *pick.Costs
	cursor atomic.Uint64
}

// NewCostLoad builds the rung over costs.
func NewCostLoad(costs *pick.Costs) *CostLoad { return &CostLoad{costs: costs} }

// Name implements pick.Picker.
func (t *CostLoad) Name() pick.Name { return TierLoad }

// Pick implements pick.Picker.
func (t *CostLoad) Pick(f *Facts, cands []Candidate) (int, string, bool) {
	return costLoad(t.costs, f, cands, 0, &t.cursor), "", true
}
