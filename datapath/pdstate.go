package datapath

import (
	"time"

	"github.com/infergate/infergate/datapath/chwbl"
	"github.com/infergate/infergate/datapath/ladder"
	"github.com/infergate/infergate/datapath/pd"
	"github.com/infergate/infergate/datapath/pd/bufpool"
	"github.com/infergate/infergate/datapath/pick"
	"github.com/infergate/infergate/datapath/upstream"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/radix"
	"github.com/infergate/infergate/spec"
	"github.com/sirupsen/logrus"
)

// pdView is the P/D part of one compiled generation: the engine's dialect
// and the ladder over this generation's tiers. Session pins and the prefix
// index are shared with the neighbouring generations (ruleState).
type pdView struct {
	dialect  pd.Dialect      // nil: the engine has no P/D sequence (role-0 only)
	sender   upstream.Sender // the legs' way to the engines (over the rule's TLS for security 2)
	ladder   *ladder.Ladder
	sessions *ladder.Sessions
	prefix   *ladder.PrefixTier // nil unless pd_cache_aware_mode
	kvTier   *ladder.KVExact    // nil unless kvExactMode 1
	// costs is the cost state the rule prices with, pooled over its own
	// endpoints (the KV view's when it has one, so one rule has one pool);
	// nil with the legacy in-flight guards.
	costs    *pick.Costs
	hasRole0 bool
	// moriio: a vLLM rule with a MoRI-IO endpoint (refuseMoRIIOUnsplit),
	// decided once here rather than by a scan of the endpoints per request.
	moriio bool
	models *pd.ModelLabels // model label of loxilb_ai_pd_requests_total
	// keys recycles the prompt keys Tier 1 is matched on: up to 256 KiB
	// of an agent's prompt each (pdselect.go). The runtime's one pool,
	// shared with every rule and the dialects' leg bodies (nil: none).
	keys *bufpool.Pool
}

// prefixState is a rule's Tier 1 index, kept across updates while the rule
// stays cache-aware.
type prefixState struct {
	index *radix.Index
	label string // metrics rule label the index gauges are tracked under
}

// attachLocked builds the generation's P/D view, KV view and CHWBL ring
// before c is published. prevRule is the rule whose KV state c inherits
// (nil: fresh). Failures here never refuse the rule: a missing tier only
// means requests fall through to the next one, which is logged.
func (rt *Runtime) attachLocked(rs *ruleState, c *compiled, prevRule *spec.Rule) {
	r := c.rule
	c.rx = rt.rx
	rt.attachFlow(rs, c) // flowgate.go
	log := rt.log.WithField("rule", c.label)
	if r.KV != nil {
		rk, err := rt.kv.Install(prevRule, r)
		if err != nil {
			log.WithError(err).Warn("KV-exact event sources did not all start; Tier 1.5 falls through until they do")
		}
		c.kv = rk
		if rk != nil {
			rk.SetHealthy(func() []spec.Endpoint { return rs.cur.Load().kvHealthy() })
		}
	} else if prevRule != nil && prevRule.KV != nil {
		_, _ = rt.kv.Install(prevRule, r) // removes the old KV state
	}
	if r.Selector == spec.SelCHWBL || r.Selector == spec.SelWeightedCHWBL {
		members := make([]chwbl.Member, len(r.Endpoints))
		for i, e := range r.Endpoints {
			members[i] = chwbl.Member{ID: e.ID, Weight: e.Weight}
		}
		ring, err := chwbl.NewRing(members, chwbl.FromSpec(r.CHWBL, r.Selector))
		if err != nil {
			log.WithError(err).Warn("CHWBL ring not built; the rule selects round-robin")
		}
		c.ring = ring
	}
	if r.PD == nil {
		rs.sessions = nil
		rs.dropPrefix(rt)
		return
	}
	p := &pdView{models: pd.NewModelLabels(r.Key.ModelName, 0), sender: upstream.WithTLS(rt.sender, c.up), keys: rt.pdBuffers}
	if c.kv != nil {
		p.costs = c.kv.Costs()
	} else {
		p.costs = rt.kv.CostsFor(r)
	}
	quiet := rt.silenceFor(r)
	if d, ok := pd.New(r.Engine, pd.Options{
		PrefillTimeout:    rt.opts.PrefillTimeout,
		DecodeTimeout:     capBy(rt.opts.DecodeFirstByteTimeout, r.IdleTimeout),
		StreamIdleTimeout: quiet.streamIdle,
		BodyIdleTimeout:   quiet.bodyStall,
		Buffers:           rt.pdBuffers,
		Log:               rt.log,
	}); ok {
		p.dialect = d
	}
	for _, e := range r.Endpoints {
		if e.Role == spec.RoleAny {
			p.hasRole0 = true
		}
	}
	p.moriio = r.Engine == spec.EngineVLLM && pd.HasMoRIIOEndpoint(r)
	ttl := r.PD.SessionTTL
	if ttl <= 0 {
		ttl = defaultSessionTTL
	}
	if rs.sessions == nil || rs.sessionTTL != ttl {
		rs.sessions = ladder.NewSessions(ttl, rt.opts.MaxSessions)
		rs.sessionTTL = ttl
	}
	p.sessions = rs.sessions
	var tiers []ladder.PrefillTier
	if r.PD.CacheAware {
		if px := rs.ensurePrefix(rt, c.label, log); px != nil {
			mr := rt.rx.MatchRate.WithLabelValues(c.label)
			p.prefix = ladder.NewPrefixTier(ladder.PrefixOptions{
				Index:      px.index,
				Threshold:  r.PD.CacheThreshold,
				BalanceAbs: r.PD.BalanceAbsThreshold,
				Costs:      p.costs,
				OnLookup:   func(rate float64) { mr.Observe(rate) },
				Endpoints:  prefillIDs(r),
			})
			tiers = append(tiers, p.prefix)
		}
	} else {
		rs.dropPrefix(rt)
	}
	if c.kv != nil && c.kv.Mode() == 1 {
		if t, ok := c.kv.Tier(nil).(*ladder.KVExact); ok {
			p.kvTier = t
			tiers = append(tiers, t)
		}
	}
	p.ladder = ladder.New(p.sessions, tiers...).WithPolicies(r.PD.PrefillPolicy, r.PD.DecodePolicy).WithCosts(p.costs)
	if rt.opts.ReplicaConsistent {
		p.ladder.Replicated()
	}
	c.pd = p
}

// defaultSessionTTL is pd_session_ttl_sec 0 (compile normally resolves it).
const defaultSessionTTL = 300 * time.Second

// ensurePrefix returns the rule's prefix index, creating it on first use.
func (rs *ruleState) ensurePrefix(rt *Runtime, label string, log logrus.FieldLogger) *prefixState {
	if rs.prefix != nil && rs.prefix.label == label {
		return rs.prefix
	}
	rs.dropPrefix(rt)
	ix, err := radix.New(rt.opts.PrefixIndex)
	if err != nil {
		log.WithError(err).Warn("prefix index options invalid; Tier 1 disabled")
		return nil
	}
	rs.prefix = &prefixState{index: ix, label: label}
	rt.rx.TrackIndex(label, func() metrics.IndexStats {
		st := ix.Stats()
		return metrics.IndexStats{Entries: st.Entries, SizeBytes: st.SizeBytes, Evictions: st.Evictions}
	})
	return rs.prefix
}

// dropPrefix releases the rule's prefix index and its gauges.
func (rs *ruleState) dropPrefix(rt *Runtime) {
	if rs.prefix == nil {
		return
	}
	rt.rx.ForgetRule(rs.prefix.label)
	rs.prefix = nil
}

// forgetEndpoint drops every affinity pointing at id: session pins and
// learned prefixes. Called when the endpoint goes down, its breaker opens
// or an update removes it, so stuck affinity never waits for a TTL.
func (rs *ruleState) forgetEndpoint(id string) {
	if c := rs.cur.Load(); c != nil {
		c.forgetEndpoint(id)
	}
}

func (c *compiled) forgetEndpoint(id string) {
	if c.pd == nil {
		return
	}
	if c.pd.sessions != nil {
		c.pd.sessions.DropEndpoint(id)
	}
	if c.pd.prefix != nil {
		c.pd.prefix.Forget(id)
	}
}

// kvHealthy lists the usable endpoints of the KV-eligible role (prefills of
// a P/D rule, everything of a single pool): the ones /tokenize may be
// asked.
func (c *compiled) kvHealthy() []spec.Endpoint {
	var now int64
	var out []spec.Endpoint
	for i, e := range c.rule.Endpoints {
		if c.rule.PD != nil && e.Role != spec.RolePrefill {
			continue
		}
		if c.usable(i, 0, &now) {
			out = append(out, e)
		}
	}
	return out
}

// usable is "may receive a new request" regardless of the backup tier:
// not excluded, not draining, probed healthy, breaker-selectable.
func (c *compiled) usable(i int, excl uint64, now *int64) bool {
	if excl&bit(i) != 0 {
		return false
	}
	sl := &c.slots[i]
	if sl.weight <= 0 || sl.ep.health.Load() != healthActive {
		return false
	}
	return !c.cb.enabled || sl.ep.br.selectable(now)
}

// prefillIDs lists a rule's prefill endpoints so a Tier 1 rebuilt on a rule
// update can tell an excluded owner from an unknown one at once.
func prefillIDs(r *spec.Rule) []string {
	var ids []string
	for _, ep := range r.Endpoints {
		if ep.Role == spec.RolePrefill {
			ids = append(ids, ep.ID)
		}
	}
	return ids
}
