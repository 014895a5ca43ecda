package datapath

import (
	"net/http"
	"net/netip"
	"net/textproto"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/datapath/chwbl"
	"github.com/infergate/infergate/datapath/flow"
	"github.com/infergate/infergate/datapath/kvplane"
	"github.com/infergate/infergate/datapath/pd"
	"github.com/infergate/infergate/datapath/pick"
	"github.com/infergate/infergate/datapath/window"
	"github.com/infergate/infergate/enginestats"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/spec"
	"github.com/prometheus/client_golang/prometheus"
)

// Health states (values match the infergate_datapath_endpoint_health_state gauge).
const (
	healthProbing = metrics.HealthProbing
	healthActive  = metrics.HealthActive
	healthDown    = metrics.HealthDown
)

func healthName(s int32) string {
	switch s {
	case healthActive:
		return "active"
	case healthDown:
		return "down"
	}
	return "probing"
}

// endpoint is the mutable runtime state of one engine of one rule. It is keyed
// by the endpoint ID and carried from one compiled generation of the rule to
// the next, so health, breaker and load survive updates.
type endpoint struct {
	id   string
	addr netip.AddrPort

	health atomic.Int32 // healthProbing / healthActive / healthDown
	active atomic.Int64 // requests in flight (least-connections load)
	br     breaker

	// Probe streaks; touched only by the rule's prober goroutine.
	okStreak, failStreak int

	// LoxiLB's endpoint "counter": requests that reached the
	// engine (each P/D leg on the endpoint it went to) and body bytes
	// relayed through it (request bodies sent plus response bodies
	// returned to the client).
	requests atomic.Uint64
	bytes    atomic.Uint64

	// sig is the engine's own load, published by the engine scraper
	// (enginesig.go); survives rule updates with the endpoint.
	sig enginestats.Cell
	// win is the endpoint's admission window, kept across generations
	// and resized in place, so requests in flight keep counting against
	// it (flowgate.go; control plane only).
	win *window.Window
	// batch is the engine's batch limit read from the engine
	// (enginewindow.go; nil: never read); survives rule updates with the
	// endpoint.
	batch atomic.Pointer[learnedLimit]
	// window is the engine's context window read from its /v1/models
	// (ctxwindow.go; 0: unknown); survives rule updates with the endpoint.
	window atomic.Int64
	// kvEngine is a Mooncake prefill's KV engine id and its engines per DP
	// rank, read together from its bootstrap server (mooncakeid.go; nil:
	// unknown).
	kvEngine  atomic.Pointer[mooncakeEngines]
	kvIDCheck engineIDCheck // failure-driven re-reads of kvEngine (mooncakeid.go)
	// ranks counts the prefill legs in flight per DP rank the P/D dialects
	// pinned to this endpoint (rankload.go).
	ranks pd.RankLoad
}

// live points selection at the endpoint's live facts.
func (ep *endpoint) live() pick.Live {
	return pick.Live{Health: &ep.health, InFlight: &ep.active, Breaker: &ep.br.state, OpenUntil: &ep.br.openUntil, Engine: &ep.sig}
}

// epMetrics are one endpoint's metric handles, resolved once per generation
// so the request path does no label hashing in the common case.
type epMetrics struct {
	active  prometheus.Gauge
	ok      prometheus.Counter // requests_total{code="200",error=""}
	health  prometheus.Gauge
	breaker prometheus.Gauge
	serve   lazyObserver // LLM endpoint latency, phase serve (hotmetrics.go)
}

// compiled is one immutable generation of a served rule: the spec plus the
// runtime objects requests need. Requests load it once and finish on it.
type compiled struct {
	rule  *spec.Rule
	label string // metrics label "rule"
	eps   []*endpoint
	epm   []epMetrics
	slots []slot // compact per-endpoint view usable() scans
	// addrBits maps an endpoint's EPP address (eppAddr) to the mask bits of
	// the endpoints listed with it, so a subset hint is matched in one pass
	// over its entries (outsideSubset, epppick.go).
	addrBits map[string]uint64
	// pool is the rule's single-pool selection (every sel mode) over the
	// same endpoints; P/D rules use it for their unsplit relays.
	pool *pick.Pool
	cb   breakerConfig

	sessionHeader string // canonical header name for SessionFromHeader
	keys          bool   // requests need an API key (enforcesKeys, tenant.go)

	pd   *pdView         // nil for single-pool rules
	kv   *kvplane.RuleKV // nil unless kvExactMode
	ring *chwbl.Ring     // sel 8/10 only

	latency *metrics.Histogram // the series itself: Observe a direct call
	ttfb    *metrics.Histogram
	m       *metrics.Datapath
	rx      *metrics.Radix

	// TLS to engines (security 2, tls.go): nil for plaintext engines.
	up    *upTLS
	probe *http.Client // https probes with the rule's trust; nil: rt.probeClient
	// Per-request counter children made on first use (hotmetrics.go).
	chwblm chwblMetrics
	pdc    pdCounters
	llm    llmSeries
	// pairWarned is the last no_compatible_pd_pair difference logged
	// (warnNoPair, pdpair.go).
	pairWarned atomic.Pointer[string]

	// admin is the rule's closed engine admin paths (adminpath.go); nil:
	// the rule opened them.
	admin *adminGate
	// llmModels bounds the model label of the LLM latency families.
	llmModels *pd.ModelLabels
	// answerModels keeps the last model an answer named (reqObs.FirstBytes).
	answerModels lastModel

	// Flow control (flowgate.go): each endpoint's admission window and the
	// rule's queue; win is nil when the rule has no window.
	win []*window.Window
	fq  *flow.Queue
}

// slot is what selection needs of endpoint i, packed densely.
type slot struct {
	ep     *endpoint
	weight int32
	backup bool
}

// ruleLabel is the value of the `rule` metrics label.
func ruleLabel(r *spec.Rule) string {
	if r.Name != "" {
		return r.Name
	}
	return r.Key.String()
}

// newCompiled builds a generation of r, reusing endpoint state from prev
// (keyed by ID) and creating fresh endpoints in the probing state (or active
// when the rule has no probe).
func newCompiled(r *spec.Rule, prev map[string]*endpoint, opts *Options, m *metrics.Datapath) (*compiled, map[string]*endpoint) {
	c := &compiled{
		rule:  r,
		label: ruleLabel(r),
		eps:   make([]*endpoint, len(r.Endpoints)),
		slots: make([]slot, 0, len(r.Endpoints)),
		epm:   make([]epMetrics, len(r.Endpoints)),
		m:     m,
	}
	c.keys = enforcesKeys(r, opts)
	c.admin = newAdminGate(r)
	if r.CircuitBreaker || r.PD != nil {
		c.cb = breakerConfig{
			enabled:      true,
			connectFails: opts.BreakerConnectFailures,
			streak5xx:    opts.Breaker5xxStreak,
			openFor:      opts.BreakerOpenFor,
		}
		if r.PD != nil {
			c.cb.connectFails = opts.BreakerPDConnectFailures
			// P/D has its own origin-error streak (LoxiLB's, 3), independent
			// of the single-pool one: a failing prefill otherwise degrades
			// every request to a recompute.
			c.cb.streak5xx = opts.BreakerPD5xxStreak
		}
	}
	if r.Session.Source == spec.SessionFromHeader {
		c.sessionHeader = textproto.CanonicalMIMEHeaderKey(r.Session.Name)
	}
	noProbe := probeDisabled(r.Probe)
	cands := make([]pick.Candidate, 0, len(r.Endpoints))
	next := make(map[string]*endpoint, len(r.Endpoints))
	for i, se := range r.Endpoints {
		ep := prev[se.ID]
		if ep == nil {
			ep = next[se.ID] // the same engine listed twice shares state
		}
		if ep == nil {
			ep = &endpoint{id: se.ID, addr: se.Addr}
			ep.health.Store(healthProbing)
		}
		if noProbe {
			ep.health.Store(healthActive)
		}
		next[se.ID] = ep
		c.eps[i] = ep
		c.slots = append(c.slots, slot{ep: ep, weight: int32(min(se.Weight, 1<<30)), backup: se.Backup})
		cands = append(cands, pick.Candidate{ID: se.ID, Index: i, Weight: min(se.Weight, 1<<30), Backup: se.Backup, Live: ep.live()})
		c.epm[i] = epMetrics{
			active:  m.Active.WithLabelValues(c.label, se.ID),
			ok:      m.Requests.WithLabelValues(c.label, se.ID, "200", ""),
			health:  m.Health.WithLabelValues(c.label, se.ID),
			breaker: m.Breaker.WithLabelValues(c.label, se.ID),
		}
		c.epm[i].health.Set(float64(ep.health.Load()))
		c.epm[i].breaker.Set(float64(ep.br.state.Load()))
	}
	c.pool = c.newPool(cands)
	c.addrBits = c.eppAddrBits()
	c.latency = m.Latency.Series(c.label)
	c.ttfb = m.TTFB.Series(c.label)
	c.llmModels = pd.NewModelLabels(r.Key.ModelName, 0)
	return c, next
}

// newPool builds the generation's selection pool over cands; c.cb must be
// final (the pool reads breakers only when they are enabled).
func (c *compiled) newPool(cands []pick.Candidate) *pick.Pool {
	return pick.NewPool(cands, pick.PoolOptions{Selector: c.rule.Selector, Breakers: c.cb.enabled, OnRingPick: c.countPick})
}

// recordBreaker publishes a breaker transition of endpoint i (to < 0: none).
func (c *compiled) recordBreaker(i int, to int32) {
	if to < 0 {
		return
	}
	c.epm[i].breaker.Set(float64(to))
	if to == breakerOpen {
		c.forgetEndpoint(c.eps[i].id)
	}
	c.m.BreakerTrans.WithLabelValues(c.label, c.eps[i].id, breakerName(to)).Inc()
	c.m.CBFlips.Inc()
}

// countRequest records one finished request (endpoint i < 0: none chosen).
func (c *compiled) countRequest(i, status int, code string) {
	if i >= 0 && status == 200 && code == "" {
		c.epm[i].ok.Inc()
		return
	}
	id := ""
	if i >= 0 {
		id = c.eps[i].id
	}
	c.m.Requests.WithLabelValues(c.label, id, strconv.Itoa(status), code).Inc()
}

// status is the API view of this generation.
func (c *compiled) status() spec.RuleStatus {
	st := c.healthStatus()
	if c.rule.AdminDown {
		st.Ready, st.Reason = false, reasonAdminDown
	}
	return st
}

// reasonAdminDown is the status reason of a rule with adminStateUp false.
const reasonAdminDown = "administratively down (adminStateUp is false)"

// healthStatus is status from the endpoints' health alone.
func (c *compiled) healthStatus() spec.RuleStatus {
	now := time.Now()
	st := spec.RuleStatus{Endpoints: make(map[string]spec.EndpointStatus, len(c.eps)), Queue: c.queueStatus(now)}
	usable := 0
	probing := 0
	for i, ep := range c.eps {
		h := ep.health.Load()
		state := healthName(h)
		if c.rule.Endpoints[i].Weight == 0 {
			state = "draining"
		}
		b := ep.br.state.Load()
		st.Endpoints[ep.id] = spec.EndpointStatus{State: state, Breaker: breakerName(b),
			Requests: ep.requests.Load(), Bytes: ep.bytes.Load(), PairingKey: pairingKey(&c.rule.Endpoints[i]), Engine: ep.engineStatus(now),
			Window: c.windowStatus(i), BootstrapPort: c.rule.Endpoints[i].BootstrapPort, Labels: c.rule.Endpoints[i].Labels}
		if h == healthProbing {
			probing++
		}
		if state == "active" && (!c.cb.enabled || b != breakerOpen) {
			usable++
		}
	}
	if c.rule.PD != nil {
		c.pdStatus(&st)
		return st
	}
	switch {
	case usable > 0:
		st.Ready = true
	case len(c.eps) == 0:
		st.Reason = "no endpoints"
	case probing > 0:
		st.Reason = "endpoints still probing"
	default:
		st.Reason = "no healthy endpoint"
	}
	return st
}
