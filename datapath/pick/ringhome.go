package pick

import (
	"time"

	"github.com/infergate/infergate/datapath/chwbl"
)

// Keeping a prefix key's ring home. CHWBL's bound passes over a member
// whose requests in flight exceed the mean by its factor. Counted in
// requests, it trips on streams that are only decoding, which delay a
// newcomer's first token by a share of each batch step, and every trip
// sends a prompt whose head the home holds to a neighbour that computes it
// cold; the neighbour's copy then goes unused when the home's count drops.
// On the routing benchmark's shared-prefix workload (32 system prompts on
// 8 engines, 70 % load) every request that lost its cache was such a skip.
//
// So when the bound passes over the home of a prefix key, both are priced
// with the cost model's queue term (the engine's own running and waiting
// counts when scraped, else the in-flight count split at the batch
// window), and the home keeps the request while the wait its longer queue
// adds is below the prefill of the prompt head the ring key hashed, the
// part every request of that key shares and the home is assumed to hold.
// A home with a real queue (requests waiting beyond its batch) still
// spills, so a hot prompt spreads once it would saturate one engine.

// ringHome returns the member the key's walk reaches first among the
// eligible ones, ignoring load (-1: none).
func ringHome(ring *chwbl.Ring, key uint64, eligible func(int) bool) int {
	i, _, ok := ring.PickDetail(key, func(int) int { return 0 }, eligible)
	if !ok {
		return -1
	}
	return i
}

// keepRingHome reports whether a request whose key shares sharedTokens of
// prompt head with what home holds should stay on home rather than go to
// alt, the member the bound chose: home's queue adds less wait than the
// prefill of those tokens.
func keepRingHome(m CostModel, home, alt QueueState, sharedTokens int) bool {
	if sharedTokens <= 0 {
		return false
	}
	m = m.withDefaults()
	return m.queue(home)-m.queue(alt) < time.Duration(sharedTokens)*m.PerToken
}

// queueNow is candidate i's queue as the cost model reads it now.
func (p *Pool) queueNow(i int, now time.Time) QueueState {
	c := Candidate{Load: int(p.cands[i].Live.InFlight.Load()), Engine: p.cands[i].Live.EngineLoad(now)}
	return QueueOf(&c)
}

// ringPick is the ring's choice for f among the eligible members, the
// bounded walk with the home kept as above; skipped is how many members
// the bound passed over (0 when the home was kept).
func (p *Pool) ringPick(ring *chwbl.Ring, f *PoolFacts, eligible func(int) bool) (i, skipped int, ok bool) {
	i, skipped, ok = ring.PickDetail(f.RingKey, func(i int) int { return int(p.cands[i].Live.InFlight.Load()) }, eligible)
	if !ok || skipped == 0 || f.RingSrc != chwbl.SourcePrefix {
		return i, skipped, ok
	}
	if h := ringHome(ring, f.RingKey, eligible); h >= 0 && h != i {
		now := time.Now()
		// The zero model prices with the defaults: single pools have no
		// cost knobs of their own.
		if keepRingHome(CostModel{}, p.queueNow(h, now), p.queueNow(i, now), f.RingShared) {
			return h, 0, true
		}
	}
	return i, skipped, ok
}
