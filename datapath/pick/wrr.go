package pick

import (
	"math/bits"

	"github.com/infergate/infergate/metrics"
)

// pickWRR is nginx's smooth weighted round-robin: every eligible candidate
// gains its weight, the largest wins and pays back the total. It spreads a
// 5:1:1 pool as a,a,b,a,c,a,a rather than in bursts.
func (p *Pool) pickWRR(excl uint64, backup bool, now *int64) int {
	if sched := p.sched; !backup && len(sched) > 0 {
		// Fast path: walk the precomputed smooth schedule of the static
		// weights from a shared cursor, skipping ineligible entries. A few
		// skips keep the remaining candidates' proportions; a longer walk
		// (much of the pool down) falls back to the live computation.
		L := len(sched)
		k := int((p.rr.Add(1) - 1) % uint64(L))
		for range min(L, 2*len(p.cands)) {
			if i := int(sched[k]); p.Eligible(i, excl, false, now) {
				return i
			}
			if k++; k == L {
				k = 0
			}
		}
	}
	p.wrr.mu.Lock()
	defer p.wrr.mu.Unlock()
	best, total, bestCur := -1, 0, 0
	cur := p.wrr.cur[:len(p.cands)]
	if len(p.cands) <= 64 {
		for m := p.tierMask(backup) &^ excl; m != 0; m &= m - 1 {
			i := bits.TrailingZeros64(m)
			c := &p.cands[i]
			if c.Live.Health.Load() != metrics.HealthActive ||
				p.o.Breakers && c.Live.Breaker.Load() != metrics.BreakerClosed && !BreakerSelectable(c.Live.Breaker, c.Live.OpenUntil, now) {
				continue // live(), inlined by hand: this loop is the WRR hot path
			}
			w := c.Weight
			v := cur[i] + w
			cur[i] = v
			total += w
			if best < 0 || v > bestCur {
				best, bestCur = i, v
			}
		}
	} else {
		for i := range p.cands {
			if !p.Eligible(i, excl, backup, now) {
				continue
			}
			w := p.cands[i].Weight
			v := cur[i] + w
			cur[i] = v
			total += w
			if best < 0 || v > bestCur {
				best, bestCur = i, v
			}
		}
	}
	if best >= 0 {
		cur[best] -= total
	}
	return best
}

// maxWRRSchedule bounds the precomputed schedule (sum of primary weights).
const maxWRRSchedule = 1 << 16

// buildWRRSchedule runs smooth WRR over the static primary weights for one
// full cycle (sum of weights picks) and records the order, so the common
// case is a lock-free cursor step. nil when the pool is too large.
func buildWRRSchedule(cands []Candidate) []uint16 {
	total := 0
	for _, c := range cands {
		if !c.Backup && c.Weight > 0 {
			total += c.Weight
		}
	}
	if total == 0 || total > maxWRRSchedule || len(cands) > 1<<16 {
		return nil
	}
	cur := make([]int, len(cands))
	sched := make([]uint16, 0, total)
	for range total {
		best := -1
		for i, c := range cands {
			if c.Backup || c.Weight <= 0 {
				continue
			}
			cur[i] += c.Weight
			if best < 0 || cur[i] > cur[best] {
				best = i
			}
		}
		cur[best] -= total
		sched = append(sched, uint16(best))
	}
	return sched
}
