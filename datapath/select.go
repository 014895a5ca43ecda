package datapath

import (
	"math/bits"
	"net/http"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/infergate/infergate/datapath/chwbl"
	"github.com/infergate/infergate/datapath/ladder"
	"github.com/infergate/infergate/spec"
)

// pickFacts are the request facts selectors key on.
type pickFacts struct {
	clientIP string // sel 1, and sel 3 with a source-IP session key
	session  string // sel 3 key; "" falls back to round-robin

	// sel 8/10: the routing key and its kind, computed once per request.
	ringKey uint64
	ringSrc chwbl.Source
}

// eligible is the single definition of "may receive a new request": not
// excluded by this request's earlier attempts, in the pass's tier (primary or
// backup), not draining (weight 0), probed healthy and breaker-selectable.
func (c *compiled) eligible(i int, excl uint64, backup bool, now *int64) bool {
	if i < 64 && excl&(1<<uint(i)) != 0 {
		return false
	}
	sl := &c.slots[i]
	if sl.backup != backup || sl.weight <= 0 || sl.ep.health.Load() != healthActive {
		return false
	}
	if !c.cb.enabled {
		return true
	}
	if sl.ep.br.state.Load() == breakerClosed { // inline fast path
		return true
	}
	return sl.ep.br.selectable(now)
}

// pick returns the index of the endpoint for a new request, or -1 when none
// is eligible. Backups are considered only when no primary is.
func (c *compiled) pick(f *pickFacts, excl uint64) int {
	var now int64
	if i := c.pickTier(f, excl, false, &now); i >= 0 {
		return i
	}
	return c.pickTier(f, excl, true, &now)
}

func (c *compiled) pickTier(f *pickFacts, excl uint64, backup bool, now *int64) int {
	if len(c.slots) == 0 {
		return -1
	}
	switch c.rule.Selector {
	case spec.SelSourceHash:
		return c.pickHash(f.clientIP, excl, backup, now)
	case spec.SelPersist:
		if f.session != "" {
			return c.pickHash(f.session, excl, backup, now)
		}
	case spec.SelWeightedRR:
		return c.pickWRR(excl, backup, now)
	case spec.SelLeastConn:
		return c.pickLeastConn(excl, backup, now)
	case spec.SelCHWBL, spec.SelWeightedCHWBL:
		if c.ring != nil {
			return c.pickCHWBL(f, excl, backup, now)
		}
	}
	return c.pickRR(excl, backup, now)
}

// pickRR walks from a shared cursor to the next eligible endpoint and moves
// the cursor past it, so an ineligible endpoint's share spreads over the
// rest instead of doubling its neighbour's.
func (c *compiled) pickRR(excl uint64, backup bool, now *int64) int {
	n := len(c.slots)
	i := int((c.rr.Add(1) - 1) % uint64(n))
	for k := range n {
		if c.eligible(i, excl, backup, now) {
			if k > 0 {
				c.rr.Add(uint64(k))
			}
			return i
		}
		if i++; i == n {
			i = 0
		}
	}
	return -1
}

// pickHash maps key to a home endpoint over the whole list (so the mapping is
// stable while the list is) and walks forward past ineligible ones.
func (c *compiled) pickHash(key string, excl uint64, backup bool, now *int64) int {
	n := len(c.slots)
	i := int(xxhash.Sum64String(key) % uint64(n))
	for range n {
		if c.eligible(i, excl, backup, now) {
			return i
		}
		if i++; i == n {
			i = 0
		}
	}
	return -1
}

// pickWRR is nginx's smooth weighted round-robin: every eligible endpoint
// gains its weight, the largest wins and pays back the total. It spreads a
// 5:1:1 pool as a,a,b,a,c,a,a rather than in bursts.
func (c *compiled) pickWRR(excl uint64, backup bool, now *int64) int {
	if sched := c.wrrSched; !backup && len(sched) > 0 {
		// Fast path: walk the precomputed smooth schedule of the static
		// weights from a shared cursor, skipping ineligible entries. A few
		// skips keep the remaining endpoints' proportions; a longer walk
		// (much of the pool down) falls back to the live computation.
		L := len(sched)
		k := int((c.rr.Add(1) - 1) % uint64(L))
		for range min(L, 2*len(c.slots)) {
			if i := int(sched[k]); c.eligible(i, excl, false, now) {
				return i
			}
			if k++; k == L {
				k = 0
			}
		}
	}
	c.wrr.mu.Lock()
	defer c.wrr.mu.Unlock()
	best, total, bestCur := -1, 0, 0
	cur := c.wrr.cur[:len(c.slots)]
	if len(c.slots) <= 64 {
		for m := c.tierMask(backup) &^ excl; m != 0; m &= m - 1 {
			i := bits.TrailingZeros64(m)
			sl := &c.slots[i]
			if sl.ep.health.Load() != healthActive ||
				c.cb.enabled && sl.ep.br.state.Load() != breakerClosed && !sl.ep.br.selectable(now) {
				continue // live(), inlined by hand: this loop is the WRR hot path
			}
			w := int(sl.weight)
			v := cur[i] + w
			cur[i] = v
			total += w
			if best < 0 || v > bestCur {
				best, bestCur = i, v
			}
		}
	} else {
		for i := range c.slots {
			if !c.eligible(i, excl, backup, now) {
				continue
			}
			w := int(c.slots[i].weight)
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
func buildWRRSchedule(slots []slot) []uint16 {
	total := 0
	for _, s := range slots {
		if !s.backup && s.weight > 0 {
			total += int(s.weight)
		}
	}
	if total == 0 || total > maxWRRSchedule || len(slots) > 1<<16 {
		return nil
	}
	cur := make([]int, len(slots))
	sched := make([]uint16, 0, total)
	for range total {
		best := -1
		for i, s := range slots {
			if s.backup || s.weight <= 0 {
				continue
			}
			cur[i] += int(s.weight)
			if best < 0 || cur[i] > cur[best] {
				best = i
			}
		}
		cur[best] -= total
		sched = append(sched, uint16(best))
	}
	return sched
}

// pickLeastConn takes the eligible endpoint with the fewest requests in
// flight; ties go to the first one after a rotating cursor so equal loads
// still spread.
func (c *compiled) pickLeastConn(excl uint64, backup bool, now *int64) int {
	n := len(c.slots)
	start := int((c.rr.Add(1) - 1) % uint64(n))
	best := -1
	var bestLoad int64
	if n <= 64 {
		m := c.tierMask(backup) &^ excl
		hi := m & (^uint64(0) << uint(start)) // from the cursor to the end, then wrap
		for _, part := range [2]uint64{hi, m &^ hi} {
			for ; part != 0; part &= part - 1 {
				i := bits.TrailingZeros64(part)
				ep := c.slots[i].ep
				l := ep.active.Load()
				if best >= 0 && l >= bestLoad || ep.health.Load() != healthActive {
					continue
				}
				if c.cb.enabled && ep.br.state.Load() != breakerClosed && !ep.br.selectable(now) {
					continue
				}
				best, bestLoad = i, l
			}
		}
		return best
	}
	i := start
	for range n {
		if c.eligible(i, excl, backup, now) {
			if l := c.slots[i].ep.active.Load(); best < 0 || l < bestLoad {
				best, bestLoad = i, l
			}
		}
		if i++; i == n {
			i = 0
		}
	}
	return best
}

// tierMask is the static part of eligibility for the first 64 endpoints:
// in the tier (primary or backup) and weight > 0.
func (c *compiled) tierMask(backup bool) uint64 {
	if backup {
		return c.backupMask
	}
	return c.primaryMask
}

// pickAdmitted picks and claims a breaker slot, excluding endpoints whose
// half-open trial another request won in the meantime.
func (c *compiled) pickAdmitted(f *pickFacts, excl uint64) (int, uint64) {
	for range len(c.eps) + 1 {
		i := c.pick(f, excl)
		if i < 0 || !c.cb.enabled {
			return i, excl
		}
		ok, to := c.eps[i].br.admit()
		c.recordBreaker(i, to)
		if ok {
			return i, excl
		}
		excl |= bit(i)
	}
	return -1, excl
}

func bit(i int) uint64 {
	if i >= 64 {
		return 0
	}
	return 1 << uint(i)
}

// chwblKey computes a sel 8/10 request's routing key: the prefix hash of
// the canonical prompt key at chwbl_prefix_hash_level (salted with the
// model, so two models never share a cache home), else the session key
// (X-Conversation-Id, body "user"), else round-robin.
func (c *compiled) chwblKey(f *pickFacts, r *http.Request, body []byte) {
	if c.ring == nil {
		return
	}
	level := 1
	if c.rule.CHWBL != nil && c.rule.CHWBL.PrefixHashLevel > 0 {
		level = c.rule.CHWBL.PrefixHashLevel
	}
	top := ladder.ScanBody(body)
	model, session := requestIdentity(r.Header, top)
	key := top.AppendPromptKey(nil, r.URL.Path, chwbl.PrefixLevelBytes(level))
	f.ringKey, f.ringSrc = c.ring.Key(key, level, model, session)
}

// pickCHWBL walks the ring from the request's key to the first eligible
// endpoint within the load bound.
func (c *compiled) pickCHWBL(f *pickFacts, excl uint64, backup bool, now *int64) int {
	i, skipped, ok := c.ring.PickDetail(f.ringKey,
		func(i int) int { return int(c.slots[i].ep.active.Load()) },
		func(i int) bool { return c.eligible(i, excl, backup, now) })
	if !ok {
		return -1
	}
	c.countPick(f.ringSrc, skipped)
	return i
}

// pickKV is kvExactMode 3's first choice for a single pool: the endpoint
// holding the longest trusted prefix of the request's KV blocks, admitted
// through its breaker; -1 (a miss, untrusted inventory, load guard) keeps
// the rule's selector.
func (rt *Runtime) pickKV(c *compiled, r *http.Request, body []byte, excl uint64) int {
	if len(body) == 0 {
		return -1
	}
	var now int64
	var cands []ladder.Candidate
	for i, e := range c.rule.Endpoints {
		if !e.Backup && c.usable(i, excl, &now) {
			cands = append(cands, ladder.Candidate{ID: e.ID, Index: i, Load: int(c.eps[i].active.Load())})
		}
	}
	if len(cands) == 0 {
		return -1
	}
	f := ladder.Facts{Ctx: r.Context(), Path: r.URL.Path, Body: body, Now: time.Now()}
	f.Model, _ = requestIdentity(r.Header, ladder.ScanBody(body))
	k, _, ok := c.kv.PickSingle(&f, cands)
	if !ok || k < 0 || k >= len(cands) {
		return -1
	}
	i := cands[k].Index
	if c.cb.enabled {
		admitted, to := c.eps[i].br.admit()
		c.recordBreaker(i, to)
		if !admitted {
			return -1
		}
	}
	c.kv.NoteWork(&f, c.rule.Endpoints[i].ID)
	return i
}
