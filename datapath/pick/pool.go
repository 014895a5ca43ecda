package pick

import (
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"

	"github.com/infergate/infergate/datapath/chwbl"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/spec"
)

// PoolOptions configures a Pool.
type PoolOptions struct {
	// Selector is the rule's mode (spec.Sel*); unknown modes round-robin.
	Selector spec.Selector
	// Breakers makes eligibility consult each candidate's circuit breaker.
	Breakers bool
	// OnRingPick, if set, is told every CHWBL pick's key source and how many
	// members the load bound passed over (the datapath's metrics). It is
	// called on the request path and must not block.
	OnRingPick func(src chwbl.Source, skipped int)
}

// Pool is one single-pool rule's candidates and the state its selection
// mode keeps between requests (a shared cursor, smooth-WRR weights). Its
// modes read each candidate's Live facts on demand instead of taking a
// snapshot, so round-robin over 32 endpoints touches one of them, and a
// pick allocates nothing. Safe for concurrent use.
type Pool struct {
	o     PoolOptions
	cands []Candidate
	// primary / backup: bit i set when candidate i (< 64) is in that tier
	// with weight > 0, the static part of eligibility.
	primary, backup uint64

	rr    atomic.Uint64 // shared cursor (rr, least-connections ties, WRR schedule)
	wrr   wrrState      // smooth WRR current weights (slow path)
	sched []uint16      // precomputed smooth WRR cycle (fast path)
}

// wrrState is nginx's smooth weighted round-robin state.
type wrrState struct {
	mu  sync.Mutex
	cur []int
}

// NewPool builds a pool over cands, whose Index must be their position and
// whose Live facts must be set. The pool keeps cands; the caller must not
// change it afterwards.
func NewPool(cands []Candidate, o PoolOptions) *Pool {
	p := &Pool{o: o, cands: cands}
	p.wrr.cur = make([]int, len(cands))
	for i, c := range cands {
		if i < 64 && c.Weight > 0 {
			if c.Backup {
				p.backup |= 1 << uint(i)
			} else {
				p.primary |= 1 << uint(i)
			}
		}
	}
	if o.Selector == spec.SelWeightedRR {
		p.sched = buildWRRSchedule(cands)
	}
	return p
}

// Candidates is the pool's candidate list (read-only).
func (p *Pool) Candidates() []Candidate { return p.cands }

// Eligible is the single definition of "may receive a new request": not in
// excl (this request's earlier attempts, bit i for candidate i < 64), in the
// pass's tier (primary or backup), not draining (weight 0), probed healthy
// and breaker-selectable.
func (p *Pool) Eligible(i int, excl uint64, backup bool, now *int64) bool {
	if i < 64 && excl&(1<<uint(i)) != 0 {
		return false
	}
	c := &p.cands[i]
	if c.Backup != backup || c.Weight <= 0 || c.Live.Health.Load() != metrics.HealthActive {
		return false
	}
	if !p.o.Breakers {
		return true
	}
	if c.Live.Breaker.Load() == metrics.BreakerClosed { // inline fast path
		return true
	}
	return BreakerSelectable(c.Live.Breaker, c.Live.OpenUntil, now)
}

// Pick returns the index of the candidate for a new request, or -1 when
// none is eligible. Backups are considered only when no primary is. ring is
// the rule's CHWBL ring (nil: CHWBL modes round-robin, as a rule whose ring
// could not be built does).
func (p *Pool) Pick(f *PoolFacts, excl uint64, ring *chwbl.Ring) int {
	var now int64
	if i := p.pickTier(f, excl, false, &now, ring); i >= 0 {
		return i
	}
	return p.pickTier(f, excl, true, &now, ring)
}

func (p *Pool) pickTier(f *PoolFacts, excl uint64, backup bool, now *int64, ring *chwbl.Ring) int {
	if len(p.cands) == 0 {
		return -1
	}
	switch p.o.Selector {
	case spec.SelSourceHash:
		return p.pickHash(f.ClientIP, excl, backup, now)
	case spec.SelPersist:
		if f.Session != "" {
			return p.pickHash(f.Session, excl, backup, now)
		}
	case spec.SelWeightedRR:
		return p.pickWRR(excl, backup, now)
	case spec.SelLeastConn:
		return p.pickLeastConn(excl, backup, now)
	case spec.SelCHWBL, spec.SelWeightedCHWBL:
		if ring != nil {
			return p.pickCHWBL(ring, f, excl, backup, now)
		}
	}
	return p.pickRR(excl, backup, now)
}

// pickRR walks from a shared cursor to the next eligible candidate and
// moves the cursor past it, so an ineligible candidate's share spreads over
// the rest instead of doubling its neighbour's.
func (p *Pool) pickRR(excl uint64, backup bool, now *int64) int {
	n := len(p.cands)
	i := int((p.rr.Add(1) - 1) % uint64(n))
	for k := range n {
		if p.Eligible(i, excl, backup, now) {
			if k > 0 {
				p.rr.Add(uint64(k))
			}
			return i
		}
		if i++; i == n {
			i = 0
		}
	}
	return -1
}

// pickHash maps key to a home candidate over the whole list (so the mapping
// is stable while the list is) and walks forward past ineligible ones.
func (p *Pool) pickHash(key string, excl uint64, backup bool, now *int64) int {
	n := len(p.cands)
	i := int(xxhash.Sum64String(key) % uint64(n))
	for range n {
		if p.Eligible(i, excl, backup, now) {
			return i
		}
		if i++; i == n {
			i = 0
		}
	}
	return -1
}

// tierMask is the static part of eligibility for the first 64 candidates:
// in the tier (primary or backup) and weight > 0.
func (p *Pool) tierMask(backup bool) uint64 {
	if backup {
		return p.backup
	}
	return p.primary
}

// pickLeastConn takes the eligible candidate with the fewest requests in
// flight; ties go to the first one after a rotating cursor so equal loads
// still spread.
func (p *Pool) pickLeastConn(excl uint64, backup bool, now *int64) int {
	n := len(p.cands)
	start := int((p.rr.Add(1) - 1) % uint64(n))
	best := -1
	var bestLoad int64
	if n <= 64 {
		m := p.tierMask(backup) &^ excl
		hi := m & (^uint64(0) << uint(start)) // from the cursor to the end, then wrap
		for _, part := range [2]uint64{hi, m &^ hi} {
			for ; part != 0; part &= part - 1 {
				i := bits.TrailingZeros64(part)
				c := &p.cands[i]
				l := c.Live.InFlight.Load()
				if best >= 0 && l >= bestLoad || c.Live.Health.Load() != metrics.HealthActive {
					continue
				}
				if p.o.Breakers && c.Live.Breaker.Load() != metrics.BreakerClosed && !BreakerSelectable(c.Live.Breaker, c.Live.OpenUntil, now) {
					continue
				}
				best, bestLoad = i, l
			}
		}
		return best
	}
	i := start
	for range n {
		if p.Eligible(i, excl, backup, now) {
			if l := p.cands[i].Live.InFlight.Load(); best < 0 || l < bestLoad {
				best, bestLoad = i, l
			}
		}
		if i++; i == n {
			i = 0
		}
	}
	return best
}

// RingChoice is the primary CHWBL would choose for key now, without side
// effects (no metric, no cursor): what the routing explanation predicts.
func (p *Pool) RingChoice(ring *chwbl.Ring, f *PoolFacts) (int, bool) {
	var now int64
	i, _, ok := p.ringPick(ring, f, func(i int) bool { return p.Eligible(i, 0, false, &now) })
	return i, ok
}

// pickCHWBL walks the ring from the request's key to the first eligible
// candidate within the load bound.
func (p *Pool) pickCHWBL(ring *chwbl.Ring, f *PoolFacts, excl uint64, backup bool, now *int64) int {
	i, skipped, ok := p.ringPick(ring, f, func(i int) bool { return p.Eligible(i, excl, backup, now) })
	if !ok {
		return -1
	}
	if p.o.OnRingPick != nil {
		p.o.OnRingPick(f.RingSrc, skipped)
	}
	return i
}
