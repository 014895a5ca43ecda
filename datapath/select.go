package datapath

import (
	"net/http"
	"time"

	"github.com/infergate/infergate/datapath/chwbl"
	"github.com/infergate/infergate/datapath/ladder"
	"github.com/infergate/infergate/datapath/pick"
	"github.com/infergate/infergate/spec"
)

// Single-pool selection. Every choice goes through the pick package: the
// rule's mode runs over its pick.Pool, and kvExactMode 3 runs the KV-exact
// picker over a snapshot of the same candidates first. The datapath adds
// only what is its own: the request facts (source, session, CHWBL key) and
// claiming the chosen endpoint's breaker slot.

// poolFacts computes what the rule's mode keys on, once per request.
func (c *compiled) poolFacts(r *http.Request, body []byte) pick.PoolFacts {
	f := pick.PoolFacts{ClientIP: clientIP(r.RemoteAddr)}
	switch c.rule.Selector {
	case spec.SelPersist:
		f.Session = c.sessionKey(r, f.ClientIP)
	case spec.SelCHWBL, spec.SelWeightedCHWBL:
		c.chwblKey(&f, r, body)
	}
	return f
}

// choose picks the endpoint of a single-pool request's next attempt and
// claims its breaker slot: on the first attempt of a kvExactMode-3 rule the
// KV-exact picker may choose, else (a miss, untrusted inventory, the load
// guard, or a retry) the rule's mode. It returns -1 when nothing is
// eligible, and excl grown by endpoints lost to a half-open race. placed
// is the cost model's record of a KV-exact placement (nil otherwise), to
// be told when the first token arrives. by names what chose: the KV-exact
// picker's name, else the rule's mode; the access line and the span must
// not credit the mode with a KV-exact choice.
func (rt *Runtime) choose(c *compiled, f *pick.PoolFacts, r *http.Request, body []byte, excl uint64, first bool) (i int, _ uint64, placed *pick.Placed, by string) {
	if first && c.kv != nil && c.kv.Mode() == 3 && c.rule.PD == nil {
		if i, placed, by := rt.pickKV(c, r, body, excl); i >= 0 {
			return i, excl, placed, by
		}
	}
	i, excl = c.pickAdmitted(f, excl)
	return i, excl, nil, c.rule.Selector.String()
}

// pick returns the index of the endpoint for a new request, or -1 when none
// is eligible: the rule's mode over its pool, backups only when no primary
// is eligible.
func (c *compiled) pick(f *pick.PoolFacts, excl uint64) int {
	return c.pool.Pick(f, excl, c.ring)
}

// pickAdmitted picks and claims a breaker slot, excluding endpoints whose
// half-open trial another request won in the meantime.
func (c *compiled) pickAdmitted(f *pick.PoolFacts, excl uint64) (int, uint64) {
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
func (c *compiled) chwblKey(f *pick.PoolFacts, r *http.Request, body []byte) {
	if c.ring == nil {
		return
	}
	level := c.chwblLevel()
	top := ladder.ScanBody(body)
	model, session := requestIdentity(r.Header, top)
	c.ringFacts(f, top.AppendPromptKey(nil, r.URL.Path, chwbl.PrefixLevelBytes(level)), level, model, session)
}

// chwblLevel is the rule's chwbl_prefix_hash_level (1 when unset).
func (c *compiled) chwblLevel() int {
	if c.rule.CHWBL != nil && c.rule.CHWBL.PrefixHashLevel > 0 {
		return c.rule.CHWBL.PrefixHashLevel
	}
	return 1
}

// ringFacts sets f's ring key from the prompt key cut at level, the model
// and the session key, with RingShared: the tokens of prompt head a prefix
// key hashed (0 for other keys). The request path and the explanation
// both use it, so the explanation predicts the pick.
func (c *compiled) ringFacts(f *pick.PoolFacts, key []byte, level int, model, session string) {
	f.RingKey, f.RingSrc = c.ring.Key(key, level, model, session)
	f.RingShared = 0
	if f.RingSrc == chwbl.SourcePrefix {
		f.RingShared = len(key) / ladder.BytesPerToken
	}
}

// pickKV is kvExactMode 3's first choice for a single pool: the endpoint
// holding the longest trusted prefix of the request's KV blocks, admitted
// through its breaker; -1 (a miss, untrusted inventory, load guard) keeps
// the rule's selector. With the cost model, a miss on a least-connections
// rule is placed here too (the cheapest estimate), and the placement comes
// back for the first-token report. by is the name of the picker that chose.
func (rt *Runtime) pickKV(c *compiled, r *http.Request, body []byte, excl uint64) (i int, placed *pick.Placed, by string) {
	if len(body) == 0 {
		return -1, nil, ""
	}
	var now int64
	// The snapshot is 128 bytes per candidate and dead once the pick is
	// made (nothing below keeps cands: prices and the placement copy the
	// IDs), so it is reused across picks; each pick holds its own.
	cp, _ := rt.cands.Get().(*[]pick.Candidate)
	if cp == nil {
		cp = new([]pick.Candidate)
	}
	defer rt.cands.Put(cp)
	cands := c.appendKVCandidates((*cp)[:0], excl, &now)
	*cp = cands
	if len(cands) == 0 {
		return -1, nil, ""
	}
	f := pick.Facts{Ctx: r.Context(), Path: r.URL.Path, Body: body, Now: time.Now()}
	f.Model, _ = requestIdentity(r.Header, ladder.ScanFacts(&f))
	k, name, _, ok := c.kv.PickSingle(&f, cands)
	if !ok || k < 0 || k >= len(cands) {
		return -1, nil, ""
	}
	i = cands[k].Index
	if c.cb.enabled {
		admitted, to := c.eps[i].br.admit()
		c.recordBreaker(i, to)
		if !admitted {
			return -1, nil, ""
		}
	}
	c.kv.NoteWork(&f, cands[k])
	return i, f.Placed, string(name)
}

// kvCandidates is the snapshot the KV-exact picker chooses from on a single
// pool: the usable primaries outside excl with their load now.
func (c *compiled) kvCandidates(excl uint64, now *int64) []pick.Candidate {
	return c.appendKVCandidates(make([]pick.Candidate, 0, len(c.pool.Candidates())), excl, now)
}

// appendKVCandidates is kvCandidates appended to cands.
func (c *compiled) appendKVCandidates(cands []pick.Candidate, excl uint64, now *int64) []pick.Candidate {
	all := c.pool.Candidates()
	var wall time.Time
	for i, cand := range all {
		if !cand.Backup && c.usable(i, excl, now) {
			cand.Load = int(cand.Live.InFlight.Load())
			cand.Engine = c.eps[i].engineLoad(&wall)
			cands = append(cands, cand)
		}
	}
	return cands
}
