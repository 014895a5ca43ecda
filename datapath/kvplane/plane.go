package kvplane

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/infergate/infergate/datapath/ladder"
	"github.com/infergate/infergate/datapath/pick"
	"github.com/infergate/infergate/kvexact"
	"github.com/infergate/infergate/kvexact/tokenize"
	"github.com/infergate/infergate/kvexact/trtpoll"
	"github.com/infergate/infergate/kvexact/zmqsub"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/spec"
)

// DefaultZMQPort is kvZmqPort's default (vLLM's and LoxiLB's).
const DefaultZMQPort = 5557

// Defaults of Options.
const (
	DefaultWatchdogWindow  = time.Minute
	DefaultSingleLoadGuard = 3
)

// StartSubFunc starts one engine's ZMQ subscriber (injectable in tests).
type StartSubFunc func(t zmqsub.Target, sink zmqsub.Sink, o zmqsub.Options) (io.Closer, error)

// StartBindFunc starts the shared bound SUB socket.
type StartBindFunc func(t zmqsub.BindTarget, sink zmqsub.Sink, o zmqsub.Options) (io.Closer, error)

// StartTRTFunc starts one TensorRT-LLM poller.
type StartTRTFunc func(t trtpoll.Target, sink trtpoll.Sink, o trtpoll.Options) (io.Closer, error)

// Options are the daemon's KV-exact settings.
type Options struct {
	// BindAddr, when set ("tcp://0.0.0.0:5557"), switches vLLM/SGLang rules
	// to the bind topology: one SUB socket, engines connect to it.
	BindAddr string `yaml:"kv-bind-addr"`
	// ReplayPortOffset: 0 = no replay; else the engine's replay ROUTER is
	// at kvZmqPort+offset (rank r at +r).
	ReplayPortOffset int `yaml:"kv-replay-port-offset"`
	// TokenizeTimeout bounds one /tokenize round trip of a short prompt;
	// a long prompt may wait up to the prefill a cache hit would save it
	// (Cost.PerToken per estimated token), at most TokenizeMaxWait.
	TokenizeTimeout   time.Duration `yaml:"kv-tokenize-timeout"`
	TokenizeMaxWait   time.Duration `yaml:"kv-tokenize-max-wait"`
	TokenizeCacheSize int           `yaml:"-"`
	// WatchdogN is the zero-hit streak that warns; WatchdogWindow is how
	// recent the last applied event must be for lookups to count.
	WatchdogN      int           `yaml:"kv-zero-hit-n"`
	WatchdogWindow time.Duration `yaml:"-"`
	// TRTPollInterval is the pause between TensorRT-LLM drains.
	TRTPollInterval time.Duration `yaml:"kv-trt-poll-interval"`
	// SingleLoadGuard is mode 3's load guard (mode 1 uses the rule's
	// pd_balance_abs_threshold); negative disables it.
	SingleLoadGuard int `yaml:"kv-single-load-guard"`
	// LegacyLoadGuard selects the in-flight load guards (SingleLoadGuard,
	// pd_balance_abs_threshold, least in flight) for every rung instead of
	// the cost estimate (Cost): then Costs is nil.
	LegacyLoadGuard bool `yaml:"kv-legacy-load-guard"`
	// Cost estimates each candidate's time to first token (queue or
	// backlog, the prefill of the tokens it does not hold, KV saturation);
	// every rung compares it (Costs). Zero fields take pick's defaults.
	Cost pick.CostModel `yaml:",inline"`
	// Budget caps indexed blocks per rule (0: kvexact's default).
	Budget int `yaml:"-"`
	// StaleAfter untrusts an endpoint that was sent work this long ago and
	// published no event since (0: kvexact.DefaultStaleAfter; negative
	// disables), so a feed that stops with its socket up is not trusted
	// forever.
	StaleAfter time.Duration `yaml:"kv-stale-after"`
	// PendingTTL is how long the blocks a placement sent an endpoint count
	// as held by it before its events show them (kvexact.Pending; 0:
	// kvexact.DefaultPendingTTL; negative: only published blocks count).
	PendingTTL time.Duration `yaml:"kv-pending-ttl"`
	// BindLiveWindow: in the bind topology an endpoint rank is reported
	// connected while its last event is this recent (0:
	// kvexact.DefaultLiveWindow). Trust does not depend on it.
	BindLiveWindow time.Duration `yaml:"kv-bind-live-window"`
	// Tokenizers maps a model to its Hugging Face tokenizer (directory or
	// tokenizer.json; tokenize.AnyModel for every other model): Tier 1.5
	// then tokenises in process and asks the engine's /tokenize only for
	// what that cannot reproduce exactly. nil: /tokenize only.
	Tokenizers map[string]string `yaml:"kv-tokenizer"`
	// Subscriber is the template of every subscriber's options (Rule,
	// Metrics and Logger are set per rule).
	Subscriber zmqsub.Options `yaml:"-"`

	StartSub  StartSubFunc  `yaml:"-"` // nil: zmqsub.Start
	StartBind StartBindFunc `yaml:"-"` // nil: zmqsub.StartBind
	StartTRT  StartTRTFunc  `yaml:"-"` // nil: a trtpoll.Hub shared by the plane's rules
	Clock     kvexact.Clock `yaml:"-"` // nil: wall clock
}

// DefaultOptions returns the defaults.
func DefaultOptions() Options {
	return Options{
		TokenizeTimeout:   tokenize.DefaultTimeout,
		TokenizeMaxWait:   tokenize.DefaultMaxWait,
		TokenizeCacheSize: tokenize.DefaultCacheSize,
		WatchdogN:         ladder.DefaultWatchdogN,
		WatchdogWindow:    DefaultWatchdogWindow,
		TRTPollInterval:   trtpoll.DefaultInterval,
		SingleLoadGuard:   DefaultSingleLoadGuard,
		Cost:              pick.DefaultCostModel(),
		StaleAfter:        kvexact.DefaultStaleAfter,
		PendingTTL:        kvexact.DefaultPendingTTL,
		BindLiveWindow:    kvexact.DefaultLiveWindow,
		Subscriber:        zmqsub.DefaultOptions(""),
	}
}

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// Plane owns every rule's KV state. It is safe for concurrent use.
type Plane struct {
	opts Options
	m    *metrics.KV
	log  logrus.FieldLogger

	mu     sync.Mutex
	rules  map[spec.Key]*ruleState
	bind   io.Closer
	closed bool

	local *tokenize.Local // in-process tokenizer shared by every rule; nil without Tokenizers

	// costs is the per-endpoint cost state every rule learns into (an
	// engine is the same engine in every rule); each rule prices with a
	// view of it pooled over its own endpoints (CostsFor); nil with
	// LegacyLoadGuard.
	costs *pick.Costs

	// byEndpoint routes bind-topology messages: endpoint → rule states;
	// byIP resolves port-less topics (kv@<ip>@<model>).
	bindMu     sync.RWMutex
	byEndpoint map[string][]*ruleState
	byIP       map[netip.Addr][]bindRoute
}

// bindRoute is one (rule, endpoint ID) a bound-socket message feeds.
type bindRoute struct {
	st *ruleState
	id string
}

// New builds a Plane; zero option fields take defaults. m may be nil.
func New(opts Options, m *metrics.KV, log logrus.FieldLogger) *Plane {
	d := DefaultOptions()
	if opts.TokenizeTimeout <= 0 {
		opts.TokenizeTimeout = d.TokenizeTimeout
	}
	if opts.TokenizeCacheSize <= 0 {
		opts.TokenizeCacheSize = d.TokenizeCacheSize
	}
	if opts.WatchdogN <= 0 {
		opts.WatchdogN = d.WatchdogN
	}
	if opts.WatchdogWindow <= 0 {
		opts.WatchdogWindow = d.WatchdogWindow
	}
	if opts.TRTPollInterval <= 0 {
		opts.TRTPollInterval = d.TRTPollInterval
	}
	if opts.Subscriber.PollInterval <= 0 {
		opts.Subscriber = d.Subscriber
	}
	if opts.StartSub == nil {
		opts.StartSub = func(t zmqsub.Target, s zmqsub.Sink, o zmqsub.Options) (io.Closer, error) {
			return zmqsub.Start(t, s, o)
		}
	}
	if opts.StartBind == nil {
		opts.StartBind = func(t zmqsub.BindTarget, s zmqsub.Sink, o zmqsub.Options) (io.Closer, error) {
			sub, _, err := zmqsub.StartBind(t, s, o)
			return sub, err
		}
	}
	if opts.StartTRT == nil {
		// A drain is destructive: rules naming one TensorRT-LLM engine share
		// its drain, each inventory fed every event.
		hub := trtpoll.NewHub()
		opts.StartTRT = func(t trtpoll.Target, s trtpoll.Sink, o trtpoll.Options) (io.Closer, error) {
			return hub.Start(t, s, o), nil
		}
	}
	if opts.Clock == nil {
		opts.Clock = wallClock{}
	}
	if log == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		log = l
	}
	p := &Plane{opts: opts, m: m, log: log, rules: map[spec.Key]*ruleState{}, byEndpoint: map[string][]*ruleState{}, byIP: map[netip.Addr][]bindRoute{}}
	if !opts.LegacyLoadGuard {
		p.costs = pick.NewCosts(opts.Cost)
	}
	p.local = tokenize.NewLocal(tokenize.LocalOptions{Models: opts.Tokenizers, Logger: log})
	if err := p.local.Preload(); err != nil {
		log.WithError(err).Warn("kvplane: in-process tokenizers not loaded; Tier 1.5 asks the engines' /tokenize for those models")
	}
	return p
}

// Costs is the gateway's cost state (pick.Costs: priors, per-endpoint
// prefill backlog and learned costs) that every rule's view shares; nil
// when the legacy in-flight guards are selected (Options.LegacyLoadGuard)
// or p is nil. Price with CostsFor: this Costs's own pool would span every
// endpoint ever routed to, and as nothing observes through it, it stays at
// the priors.
func (p *Plane) Costs() *pick.Costs {
	if p == nil {
		return nil
	}
	return p.costs
}

// CostsFor is the cost state rule r's tiers price with: the shared
// per-endpoint state, pooled over r's endpoints alone (pick.Costs.Scoped).
// The pool is scoped per rule, not per pick, because a rule's endpoints are
// exactly the candidates its picks compare, it is fixed until the rule is
// recompiled, and the view is built once per compile rather than sorted
// per pick; a rollout recompiles the rule, so departed pods leave its
// median. nil like Costs.
func (p *Plane) CostsFor(r *spec.Rule) *pick.Costs {
	c := p.Costs()
	if c == nil || r == nil {
		return c
	}
	ids := make([]string, len(r.Endpoints))
	for i := range r.Endpoints {
		ids[i] = r.Endpoints[i].ID
	}
	return c.Scoped(ids)
}

func (p *Plane) routing() *metrics.KVRouting {
	if p.m == nil {
		return nil
	}
	return p.m.Routing
}

// ruleName is the metric label of a rule.
func ruleName(r *spec.Rule) string {
	if r.Name != "" {
		return r.Name
	}
	return r.Key.String()
}

// eligible returns the endpoints whose events a rule indexes.
func eligible(r *spec.Rule) []spec.Endpoint {
	var out []spec.Endpoint
	for _, ep := range r.Endpoints {
		if r.KV.Mode == 1 && ep.Role != spec.RolePrefill {
			continue
		}
		out = append(out, ep)
	}
	return out
}

// compatible reports whether a rule's inventory survives an update: the
// engine and every KV setting are unchanged (the endpoint set may differ).
func compatible(a, b *spec.Rule) bool {
	return a.Engine == b.Engine && *a.KV == *b.KV && ruleName(a) == ruleName(b)
}

// Install brings the rule's KV state in line with next: nil when next has
// no KV configuration (prev's state, if any, is removed). Unchanged
// endpoints keep their subscriber and inventory; removed ones are closed and
// their blocks dropped. prev may be nil (a new rule).
func (p *Plane) Install(prev, next *spec.Rule) (*RuleKV, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errors.New("kvplane: install on a closed plane")
	}
	var st *ruleState
	if prev != nil {
		st = p.rules[prev.Key]
	}
	if next == nil || next.KV == nil {
		if st != nil {
			p.removeLocked(st)
		}
		return nil, nil
	}
	if st != nil && !compatible(st.rule, next) {
		p.removeLocked(st)
		st = nil
	}
	if st == nil {
		if old := p.rules[next.Key]; old != nil { // installed without prev
			if compatible(old.rule, next) {
				st = old
			} else {
				p.removeLocked(old)
			}
		}
	}
	if st == nil {
		var err error
		if st, err = p.newState(next); err != nil {
			return nil, err
		}
	} else if prev != nil && prev.Key != next.Key {
		delete(p.rules, prev.Key)
	}
	st.rule = next
	p.rules[next.Key] = st
	rk := st.view(next)
	rk.plane = p
	rk.costs = p.CostsFor(next)
	rk.single = rk.tier(nil, p.opts.SingleLoadGuard)
	if c := rk.costs; c != nil && next.Selector == spec.SelLeastConn {
		rk.cold = ladder.NewCostLoad(c)
	}
	return rk, p.syncLocked(st, eligible(next))
}

// Remove stops the rule's subscribers and drops its inventory. Safe on nil
// and on an already removed rule.
func (p *Plane) Remove(r *RuleKV) {
	if r == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if cur := p.rules[r.st.rule.Key]; cur == r.st {
		p.removeLocked(r.st)
	}
}

// Close removes every rule and stops the bound socket.
func (p *Plane) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, st := range p.rules {
		p.removeLocked(st)
	}
	p.closed = true
	var err error
	if p.bind != nil {
		err = p.bind.Close()
		p.bind = nil
	}
	return err
}

func (p *Plane) removeLocked(st *ruleState) {
	_ = p.syncLocked(st, nil)
	if p.rules[st.rule.Key] == st {
		delete(p.rules, st.rule.Key)
	}
	st.tok.Close()
	if r := p.routing(); r != nil {
		r.ForgetRule(st.name)
	}
}

func (p *Plane) newState(r *spec.Rule) (*ruleState, error) {
	name := ruleName(r)
	iopts := kvexact.DefaultOptions(name)
	iopts.BlockSize = r.KV.BlockSize
	if r.KV.Warmup > 0 {
		iopts.Warmup = r.KV.Warmup
	}
	if p.opts.Budget > 0 {
		iopts.Budget = p.opts.Budget
	}
	if p.opts.StaleAfter != 0 {
		iopts.StaleAfter = p.opts.StaleAfter
	}
	// The bind topology has no per-engine connection: liveness comes from
	// the events (an inventory built while events flow
	// must connect on its next event, not wait for a first-ever message).
	iopts.Passive = p.opts.BindAddr != "" && r.Engine != spec.EngineTRTLLM
	iopts.LiveWindow = p.opts.BindLiveWindow
	iopts.Clock = p.opts.Clock
	iopts.Metrics = p.m
	iopts.Logger = p.log
	var pending *kvexact.Pending // nil: only published blocks count
	if p.opts.PendingTTL >= 0 {
		pending = kvexact.NewPending(p.opts.PendingTTL)
	}
	iopts.Pending = pending
	st := &ruleState{
		name:    name,
		clock:   p.opts.Clock,
		rule:    r,
		inv:     kvexact.NewInventory(iopts),
		subs:    map[string]*endpointSub{},
		last:    map[string]*atomic.Int64{},
		log:     p.log.WithField("rule", name),
		pending: pending,
	}
	st.watchdog = ladder.NewWatchdog(p.opts.WatchdogN,
		ladder.EventsFlowing(&st.lastEvent, p.opts.WatchdogWindow, p.opts.Clock.Now))
	tok, err := tokenize.NewEngine(tokenize.Options{
		Rule:      name,
		Endpoints: st.tokenizeEndpoints,
		Timeout:   p.opts.TokenizeTimeout,
		PerToken:  p.opts.Cost.PerToken,
		MaxWait:   p.opts.TokenizeMaxWait,
		CacheSize: p.opts.TokenizeCacheSize,
		Metrics:   p.routing(),
		Logger:    p.log,
	})
	if err != nil {
		return nil, fmt.Errorf("kvplane: rule %s tokenizer: %w", name, err)
	}
	st.tok = tok
	// The engine tokenizer also serves client-given token ids; for
	// TensorRT-LLM (no /tokenize) its text prompts fail fast and fall through.
	st.chain = tokenize.Chain{Local: p.local, Fallback: tok, Rule: name}
	if p.m != nil {
		st.chain.Results = p.m.LocalTokenize
	}
	return st, nil
}

// endpointSub is one endpoint's running event source.
type endpointSub struct {
	ep     spec.Endpoint
	source string // SourceZMQ, SourceBind or SourceTRT
	closer io.Closer
}

// Event sources reported by the inventory API.
const (
	SourceZMQ  = "zmq"
	SourceBind = "zmq_bind"
	SourceTRT  = "trtllm_poll"
)

// syncLocked starts and stops sources so exactly want is subscribed.
func (p *Plane) syncLocked(st *ruleState, want []spec.Endpoint) error {
	wantSet := map[string]spec.Endpoint{}
	for _, ep := range want {
		wantSet[ep.ID] = ep
	}
	for id, s := range st.subs {
		if ep, ok := wantSet[id]; ok && ep.Addr == s.ep.Addr {
			continue
		}
		if s.closer != nil {
			if err := s.closer.Close(); err != nil {
				st.log.WithError(err).WithField("endpoint", id).Warn("kvplane: closing an event source")
			}
		}
		if s.source == SourceBind {
			p.unbindEndpoint(s.ep, st)
		}
		delete(st.subs, id)
		st.inv.RemoveEndpoint(id)
		st.forgetLast(id)
		if p.m != nil {
			p.m.ForgetEndpoint(st.name, id)
		}
	}
	var errs []error
	for _, ep := range want {
		if _, ok := st.subs[ep.ID]; ok {
			continue
		}
		s, err := p.start(st, ep)
		if err != nil {
			errs = append(errs, fmt.Errorf("kvplane: rule %s endpoint %s: %w", st.name, ep.ID, err))
			continue
		}
		st.subs[ep.ID] = s
	}
	st.setEligible(want)
	return errors.Join(errs...)
}

func (p *Plane) start(st *ruleState, ep spec.Endpoint) (*endpointSub, error) {
	kv := st.rule.KV
	sink := &sink{st: st}
	if st.rule.Engine == spec.EngineTRTLLM {
		o := trtpoll.DefaultOptions(st.name)
		o.Interval = p.opts.TRTPollInterval
		if kv.BlockSize > 0 {
			o.BlockSize = kv.BlockSize
		}
		o.Metrics, o.Logger = p.routing(), p.log
		c, err := p.opts.StartTRT(trtpoll.Target{Endpoint: ep.ID, URL: "http://" + ep.Addr.String()}, sink, o)
		if err != nil {
			return nil, err
		}
		return &endpointSub{ep: ep, source: SourceTRT, closer: c}, nil
	}
	o := p.opts.Subscriber
	o.Rule, o.Metrics, o.Logger = st.name, p.m, p.log
	if p.opts.BindAddr != "" {
		if err := p.ensureBind(); err != nil {
			return nil, err
		}
		p.bindEndpoint(ep, st)
		return &endpointSub{ep: ep, source: SourceBind}, nil
	}
	port := int(kv.ZMQPort)
	if port == 0 {
		port = DefaultZMQPort
	}
	t := zmqsub.Target{Endpoint: ep.ID, Host: ep.Addr.Addr().String(), Port: port, Ranks: max(kv.DPRanks, 1)}
	if p.opts.ReplayPortOffset > 0 {
		t.ReplayPort = port + p.opts.ReplayPortOffset
		o.ReplayOnConnect = true
	}
	c, err := p.opts.StartSub(t, sink, o)
	if err != nil {
		return nil, err
	}
	return &endpointSub{ep: ep, source: SourceZMQ, closer: c}, nil
}

// ensureBind starts the shared bound socket on first use.
func (p *Plane) ensureBind() error {
	if p.bind != nil {
		return nil
	}
	o := p.opts.Subscriber
	o.Rule, o.Metrics, o.Logger = "bind", p.m, p.log
	c, err := p.opts.StartBind(zmqsub.BindTarget{Addr: p.opts.BindAddr, Allowed: p.bindAllowed}, bindSink{p}, o)
	if err != nil {
		return fmt.Errorf("kvplane: bind %s: %w", p.opts.BindAddr, err)
	}
	p.bind = c
	return nil
}

func (p *Plane) bindAllowed(endpoint string) bool {
	p.bindMu.RLock()
	defer p.bindMu.RUnlock()
	if len(p.byEndpoint[endpoint]) > 0 {
		return true
	}
	ip, ok := bareIP(endpoint)
	return ok && len(p.byIP[ip]) > 0
}

// bareIP parses a port-less topic endpoint ("10.0.0.1", "::1", "[::1]").
func bareIP(s string) (netip.Addr, bool) {
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

func (p *Plane) bindEndpoint(ep spec.Endpoint, st *ruleState) {
	p.bindMu.Lock()
	defer p.bindMu.Unlock()
	p.byEndpoint[ep.ID] = append(p.byEndpoint[ep.ID], st)
	ip := ep.Addr.Addr().Unmap()
	p.byIP[ip] = append(p.byIP[ip], bindRoute{st: st, id: ep.ID})
}

func (p *Plane) unbindEndpoint(ep spec.Endpoint, st *ruleState) {
	p.bindMu.Lock()
	defer p.bindMu.Unlock()
	l := p.byEndpoint[ep.ID]
	for i, s := range l {
		if s == st {
			l = append(l[:i:i], l[i+1:]...)
			break
		}
	}
	if len(l) == 0 {
		delete(p.byEndpoint, ep.ID)
	} else {
		p.byEndpoint[ep.ID] = l
	}
	ip := ep.Addr.Addr().Unmap()
	r := p.byIP[ip]
	for i, x := range r {
		if x.st == st && x.id == ep.ID {
			r = append(r[:i:i], r[i+1:]...)
			break
		}
	}
	if len(r) == 0 {
		delete(p.byIP, ip)
	} else {
		p.byIP[ip] = r
	}
}

// bindRoutes resolves a topic endpoint to the (rule, endpoint) pairs it
// feeds: an exact ip:port ID feeds every rule indexing it; a bare IP feeds,
// per rule, the one endpoint with that IP. A rule with several endpoints
// on the IP cannot tell them apart: the message is not applied to it and
// the ambiguity is reported (warning once, metric, inventory reason).
func (p *Plane) bindRoutes(endpoint string) []bindRoute {
	p.bindMu.RLock()
	if sts := p.byEndpoint[endpoint]; len(sts) > 0 {
		out := make([]bindRoute, len(sts))
		for i, st := range sts {
			out[i] = bindRoute{st: st, id: endpoint}
		}
		p.bindMu.RUnlock()
		return out
	}
	ip, ok := bareIP(endpoint)
	if !ok {
		p.bindMu.RUnlock()
		return nil
	}
	cands := p.byIP[ip]
	var out []bindRoute
	var ambiguous []*ruleState
	for i, c := range cands {
		if i > 0 && slices.ContainsFunc(cands[:i], func(x bindRoute) bool { return x.st == c.st }) {
			continue // rule already resolved
		}
		n := 0
		for _, x := range cands {
			if x.st == c.st {
				n++
			}
		}
		if n == 1 {
			out = append(out, c)
		} else {
			ambiguous = append(ambiguous, c.st)
		}
	}
	p.bindMu.RUnlock()
	for _, st := range ambiguous {
		p.noteAmbiguous(st, ip)
	}
	return out
}

// noteAmbiguous reports a port-less topic that matches several endpoints
// of st.
func (p *Plane) noteAmbiguous(st *ruleState, ip netip.Addr) {
	if p.m != nil {
		p.m.AmbiguousTopics.WithLabelValues(st.name, ip.String()).Inc()
	}
	if _, seen := st.ambiguous.LoadOrStore(ip, true); !seen {
		st.log.WithField("ip", ip.String()).Warn("kvplane: KV events on a port-less topic kv@<ip>@<model> match several endpoints of the rule; " +
			"they are dropped for this rule: publish with kv@<ip:port>@<model>")
	}
}

// bindSink fans a bound socket's messages out to every rule indexing the
// endpoint (two rules may share an engine).
type bindSink struct{ p *Plane }

func (b bindSink) Apply(endpoint string, rank int, seq uint64, batch kvexact.Batch) kvexact.ApplyResult {
	var res kvexact.ApplyResult
	for _, r := range b.p.bindRoutes(endpoint) {
		res = (&sink{st: r.st}).Apply(r.id, rank, seq, batch)
	}
	return res
}

func (b bindSink) NextSeq(endpoint string, rank int) (uint64, bool) {
	for _, r := range b.p.bindRoutes(endpoint) {
		return r.st.inv.NextSeq(r.id, rank)
	}
	return 0, false
}

func (b bindSink) SetConnected(endpoint string, rank int, connected bool) error {
	var errs []error
	for _, r := range b.p.bindRoutes(endpoint) {
		errs = append(errs, r.st.inv.SetConnected(r.id, rank, connected))
	}
	return errors.Join(errs...)
}

func (b bindSink) MarkRebuilt(endpoint string, rank int) error {
	var errs []error
	for _, r := range b.p.bindRoutes(endpoint) {
		errs = append(errs, r.st.inv.MarkRebuilt(r.id, rank))
	}
	return errors.Join(errs...)
}

// sink wraps a rule's inventory to note when events arrive (watchdog,
// inventory API).
type sink struct{ st *ruleState }

func (s *sink) Apply(endpoint string, rank int, seq uint64, batch kvexact.Batch) kvexact.ApplyResult {
	res := s.st.inv.Apply(endpoint, rank, seq, batch)
	now := s.st.clock.Now().UnixNano()
	s.st.lastEvent.Store(now)
	s.st.lastOf(endpoint).Store(now)
	return res
}

func (s *sink) NextSeq(endpoint string, rank int) (uint64, bool) {
	return s.st.inv.NextSeq(endpoint, rank)
}

func (s *sink) SetConnected(endpoint string, rank int, connected bool) error {
	return s.st.inv.SetConnected(endpoint, rank, connected)
}

func (s *sink) MarkRebuilt(endpoint string, rank int) error {
	return s.st.inv.MarkRebuilt(endpoint, rank)
}

// ruleState is one rule's inventory and event sources; it outlives
// compatible updates.
type ruleState struct {
	name     string
	clock    kvexact.Clock
	rule     *spec.Rule // latest installed; guarded by Plane.mu
	inv      *kvexact.Inventory
	pending  *kvexact.Pending        // nil: PendingTTL negative
	subs     map[string]*endpointSub // guarded by Plane.mu
	tok      *tokenize.Engine
	chain    tokenize.Chain // in process first, then tok
	watchdog *ladder.Watchdog
	log      logrus.FieldLogger

	lastEvent atomic.Int64 // unix ns of the last applied batch
	lastMu    sync.Mutex
	last      map[string]*atomic.Int64

	eligible atomic.Pointer[[]spec.Endpoint]
	healthy  atomic.Pointer[func() []spec.Endpoint]
	// ambiguous holds the IPs (netip.Addr) of port-less topics that matched
	// several endpoints of the rule (inventory reason, warn once).
	ambiguous sync.Map
}

func (st *ruleState) lastOf(endpoint string) *atomic.Int64 {
	st.lastMu.Lock()
	defer st.lastMu.Unlock()
	a := st.last[endpoint]
	if a == nil {
		a = &atomic.Int64{}
		st.last[endpoint] = a
	}
	return a
}

func (st *ruleState) forgetLast(endpoint string) {
	st.lastMu.Lock()
	delete(st.last, endpoint)
	st.lastMu.Unlock()
}

func (st *ruleState) setEligible(eps []spec.Endpoint) {
	c := append([]spec.Endpoint(nil), eps...)
	st.eligible.Store(&c)
}

// tokenizeEndpoints is who /tokenize goes to: the datapath's healthy
// endpoints when it said so (SetHealthy), else the eligible ones.
func (st *ruleState) tokenizeEndpoints() []string {
	var eps []spec.Endpoint
	if h := st.healthy.Load(); h != nil {
		eps = (*h)()
	} else if e := st.eligible.Load(); e != nil {
		eps = *e
	}
	out := make([]string, 0, len(eps))
	for _, ep := range eps {
		out = append(out, net.JoinHostPort(ep.Addr.Addr().String(), strconv.Itoa(int(ep.Addr.Port()))))
	}
	return out
}
