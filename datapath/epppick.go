package datapath

import (
	"context"
	"math/bits"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/datapath/ladder"
	"github.com/infergate/infergate/datapath/pd"
	"github.com/infergate/infergate/datapath/pick"
	"github.com/infergate/infergate/epp"
	"github.com/infergate/infergate/spec"
)

// The endpoint picker (package epp) asks a rule of this runtime which
// endpoint takes a request it never sees the bytes of: the gateway in front
// (Envoy) forwards them. The answer comes from the selection the proxy runs
// (choose for single pools, choosePair for P/D rules), and the pick holds
// what a proxied request holds — its in-flight count and breaker slot —
// until the gateway reports how the request ended (Served). That keeps
// least-load, breakers and affinity true whether a request came through a
// VIP or through ext_proc, or both at once.

// HeaderPrefillerHostPort names, on a P/D pick, the prefill endpoint
// ("ip:port") the request's decode should have prefilled for it. It is
// llm-d's convention: the EPP picks the decode as the destination and a
// routing sidecar beside the decode engine reads this header, runs the
// prefill there, then the decode locally.
const HeaderPrefillerHostPort = "x-prefiller-host-port"

// Refusal reasons the picker gives besides the datapath's error codes
// (which it reuses, so logs and metrics read the same).
const (
	reasonNoRule     = "no_rule"              // the named rule is not served (yet)
	reasonNoEligible = "no_eligible_endpoint" // nothing usable inside the subset hint
)

// Headers the client address is read from, lower-case as Envoy sends them.
const (
	eppHeaderExternalAddress = "x-envoy-external-address"
	eppHeaderForwardedFor    = "x-forwarded-for"
)

// EPPPicker is an epp.Picker over one rule, named by its name (or, for an
// unnamed rule, its key as `get` prints it). The rule is looked up again
// when it is removed or renamed, so rule updates apply to the next pick
// without a restart.
type EPPPicker struct {
	rt    *Runtime
	name  string
	rs    atomic.Pointer[ruleState] // last resolved; re-resolved once stopped or renamed
	admit pick.Admission            // flow control before the pick; nil admits everything
	names eppHeaderNames            // canonical header names seen so far
}

// SetAdmission puts flow control in front of every pick: a request the
// admission sheds (a *pick.Shed, or any error with ShedReason) is answered
// 429 with the reason by the EPP, before any endpoint is chosen or charged;
// an admitted request's release runs when its stream ends (Served), or at
// once when the pick itself refuses it. Call it before the picker serves.
func (p *EPPPicker) SetAdmission(a pick.Admission) { p.admit = a }

// EPPPicker returns the endpoint picker for the rule named name. The rule
// need not exist yet: picks are refused with 503 until it does (Ready says
// when).
func (rt *Runtime) EPPPicker(name string) *EPPPicker {
	return &EPPPicker{rt: rt, name: name}
}

// Ready reports whether the rule is served, for the EPP's readiness.
func (p *EPPPicker) Ready() bool { return p.rule() != nil }

// rule returns the served rule named p.name, nil when there is none. The
// cached state is checked without a lock (a removed rule's stop channel is
// closed); only a miss takes the control-plane lock.
func (p *EPPPicker) rule() *ruleState {
	if rs := p.rs.Load(); rs != nil && !stopped(rs) && rs.cur.Load().label == p.name {
		return rs
	}
	p.rt.mu.Lock()
	var found *ruleState
	for _, rs := range p.rt.rules {
		if rs.cur.Load().label != p.name {
			continue
		}
		// Names are not unique across keys: take the lowest key, so every
		// pick (and every replica) agrees on the same rule.
		if found == nil || rs.key.String() < found.key.String() {
			found = rs
		}
	}
	p.rt.mu.Unlock()
	p.rs.Store(found)
	return found
}

func stopped(rs *ruleState) bool {
	select {
	case <-rs.stop:
		return true
	default:
		return false
	}
}

// eppTicket is what a pick holds until Served: the generation it was made
// on, the endpoints whose in-flight count it raised, and the breaker slots
// it claimed.
type eppTicket struct {
	c       *compiled
	primary int   // the endpoint picked first (the decode of a P/D pair)
	prefill int   // the prefill named in HeaderPrefillerHostPort; -1 for none
	charged []int // endpoints whose in-flight count this pick raised
	start   time.Time
	bytes   uint64       // request body size, for the endpoint byte counter
	release func()       // gives the admission's slot back (SetAdmission)
	held    heldSlots    // the admission window slots taken (eppflow.go)
	placed  *pick.Placed // the cost model's booking (epplearn.go); nil when it did not place the pick
}

// Pick runs the rule's selection for the request and returns the chosen
// endpoint first, then the other eligible ones as fallbacks. It raises the
// chosen endpoints' in-flight counts and claims their breaker slots;
// Served gives them back.
func (p *EPPPicker) Pick(ctx context.Context, req *epp.Request) (epp.Result, error) {
	start := time.Now()
	rs := p.rule()
	if rs == nil {
		return epp.Result{}, epp.Unavailable(reasonNoRule)
	}
	c := rs.cur.Load()
	if c.rule.AdminDown {
		return epp.Result{}, epp.Unavailable(CodeAdminDown)
	}
	r := eppHTTPRequest(ctx, req, &p.names)
	if !pathAllowed(c.rule.AllowedPaths, r.URL.Path) {
		return epp.Result{}, &epp.Refusal{Status: http.StatusNotFound, Reason: CodePathNotAllowed}
	}
	release, err := p.admission(ctx, req)
	if err != nil {
		return epp.Result{}, err
	}
	excl := c.outsideSubset(req.Subset)
	g := &eppGate{start: start} // windows and queue (eppflow.go)
	var res epp.Result
	if c.rule.PD != nil {
		res, err = p.rt.eppPickPD(c, r, req.Body, excl, req.Subset != nil, g)
		if err == nil && res.Headers == nil {
			res.Headers = noPrefill()
		}
	} else {
		res, err = p.rt.eppPickSingle(c, r, req.Body, excl, req.Subset != nil, g)
	}
	if err != nil {
		g.held.release()
		release()
		return res, err
	}
	t := res.State.(*eppTicket)
	t.release, t.held = release, g.held
	return res, nil
}

// noPrefill is the header answer of a P/D pick that names no prefill (a
// side path, a request a role-0 endpoint takes unsplit): an empty
// HeaderPrefillerHostPort overwrites one the client sent, as llm-d's EPP
// clears it, so the decode's sidecar never runs a prefill at an address
// the client chose.
func noPrefill() map[string]string { return map[string]string{HeaderPrefillerHostPort: ""} }

// admitted is the release of a request no admission holds anything for.
func admitted() {}

// admission asks the flow control set with SetAdmission; without one every
// request is admitted and there is nothing to release.
func (p *EPPPicker) admission(ctx context.Context, req *epp.Request) (func(), error) {
	if p.admit == nil {
		return admitted, nil
	}
	release, err := p.admit.Admit(ctx, pick.Demand{
		Rule: p.name, Model: req.Hints.ModelName, Objective: req.Hints.Objective,
		FairnessID: req.Hints.FairnessID, TTFT: req.Hints.TTFT,
	})
	if err != nil {
		return nil, err
	}
	if release == nil {
		release = admitted
	}
	return release, nil
}

// eppPickSingle is choose's pick (KV-exact mode 3 first, then the rule's
// selector), with the other usable endpoints outside excl as fallbacks.
func (rt *Runtime) eppPickSingle(c *compiled, r *http.Request, body []byte, excl uint64, subset bool, g *eppGate) (epp.Result, error) {
	f := c.poolFacts(r, body)
	i, excl, placed, err := rt.eppChooseAdmitted(g, c, &f, r, body, excl)
	if err != nil {
		return epp.Result{}, err
	}
	if i < 0 {
		return epp.Result{}, epp.Unavailable(unavailableReason(subset, CodeNoHealthyBackend))
	}
	eps := c.fallbacks(i, excl|bit(i))
	t := c.charge(i, -1, len(body))
	t.placed = placed
	return epp.Result{Endpoints: eps, State: t}, nil
}

// eppPickPD is servePD's choice without the P/D sequence: the ladder picks a
// pair on generation paths (the decode is the destination, the prefill goes
// in HeaderPrefillerHostPort), side paths go to one endpoint of their role,
// and with no usable pair a role-0 endpoint takes the request unsplit.
func (rt *Runtime) eppPickPD(c *compiled, r *http.Request, body []byte, excl uint64, subset bool, g *eppGate) (epp.Result, error) {
	route := c.pdRoute(r.Method, r.URL.Path)
	switch route.kind {
	case pdRefused:
		return epp.Result{}, &epp.Refusal{Status: http.StatusNotFound, Reason: CodePDPathRefused}
	case pdOne:
		only := excl | c.roleMask(route.role)
		if !c.anyUsable(only) {
			if route.strict {
				return epp.Result{}, &epp.Refusal{Status: http.StatusNotImplemented, Reason: CodePDPathRefused}
			}
			only = excl
		}
		return rt.eppPickSingle(c, r, body, only, subset, g)
	}
	if len(body) == 0 {
		return epp.Result{}, &epp.Refusal{Status: http.StatusBadRequest, Reason: pd.CodeInvalidBody}
	}
	f := rt.pdFacts(c, r, body)
	defer c.releaseFacts(&f) // the pick keeps hashes of the key, never the key
	// The subset hint names destinations: it restricts the decode, while
	// the prefill, which the proxy never addresses, is the ladder's choice.
	pc, pairDiff, ok, err := rt.eppChoosePairAdmitted(g, c, &f, r, excl&c.roleMask(spec.RolePrefill))
	if err != nil {
		return epp.Result{}, err
	}
	if ok {
		rt.countLadder(c, pc.tr.Steps)
		pi, di := pc.tr.Prefill.Index, pc.tr.Decode.Index
		// The other decodes in the order a dialect fails over to them
		// (alternates), named without formatting an address each.
		alt := othersByLoad(pc.decodes, di)
		eps := make([]string, 1, 1+len(alt))
		eps[0] = c.eppAddr(di)
		for _, k := range alt {
			eps = append(eps, c.eppAddr(k.Index))
		}
		t := c.charge(di, pi, len(body))
		t.placed = pc.tr.Placed
		return epp.Result{
			Endpoints: eps,
			Headers:   map[string]string{HeaderPrefillerHostPort: c.eppAddr(pi)},
			State:     t,
		}, nil
	}
	role0 := excl | c.roleMask(spec.RoleAny)
	if c.pd.hasRole0 && c.anyUsable(role0) {
		rt.pdm.FallbackToNormal.WithLabelValues(c.label).Inc()
		rt.pdm.LadderDecisions.WithLabelValues(c.label, ladder.TierFallback, outcomeHit, reasonNoPair).Inc()
		return rt.eppPickSingle(c, r, body, role0, subset, g)
	}
	rt.pdm.LadderDecisions.WithLabelValues(c.label, ladder.TierFallback, outcomeMiss, reasonNoRole0).Inc()
	if pairDiff != "" {
		return epp.Result{}, epp.Unavailable(CodeNoCompatiblePDPair)
	}
	return epp.Result{}, epp.Unavailable(unavailableReason(subset, CodePoolUnavailable))
}

// unavailableReason names a 503: with a subset hint the hint may be what
// left nothing eligible, and the gateway's operator needs to know that.
func unavailableReason(subset bool, code string) string {
	if subset {
		return reasonNoEligible
	}
	return code
}

// fallbacks is the pick's endpoint list: the chosen endpoint first, then
// the usable endpoints outside excl a proxy may retry on, in the order the
// pool would prefer them: primaries before backups, least loaded first.
func (c *compiled) fallbacks(chosen int, excl uint64) []string {
	var now int64
	type fb struct {
		i      int
		backup bool
		load   int64
	}
	var buf [64]fb // a rule masks at most 64 endpoints: no allocation per pick
	l := buf[:0]
	for i := range c.eps {
		if c.usable(i, excl, &now) && c.firstIndex(c.eps[i]) == i {
			l = append(l, fb{i, c.slots[i].backup, c.eps[i].active.Load()})
		}
	}
	slices.SortStableFunc(l, func(a, b fb) int {
		if a.backup != b.backup {
			if a.backup {
				return 1
			}
			return -1
		}
		return int(a.load - b.load)
	})
	out := make([]string, 1, 1+len(l))
	out[0] = c.eppAddr(chosen)
	for _, e := range l {
		out = append(out, c.eppAddr(e.i))
	}
	return out
}

// eppAddr is endpoint i's "ip:port", the form the EPP names endpoints in:
// the rule's endpoint ID, which compiling a rule sets to exactly that, so
// naming the pick's endpoints allocates no strings. A rule built without
// IDs (by hand, in tests) gets the address formatted.
func (c *compiled) eppAddr(i int) string {
	if id := c.rule.Endpoints[i].ID; id != "" {
		return id
	}
	return c.rule.Endpoints[i].Addr.String()
}

// outsideSubset is the exclusion mask of every endpoint whose address is
// not in subset (nil: no restriction). Endpoints past the 64th cannot be
// masked; the EPP server drops any such pick outside the hint itself.
// Each hint entry costs one lookup whatever the pool's size: a hint may
// hold a hundred thousand addresses, and comparing each with every
// endpoint cost milliseconds a pick.
func (c *compiled) outsideSubset(subset []string) uint64 {
	if subset == nil {
		return 0
	}
	var inside uint64
	for _, a := range subset {
		inside |= c.addrBits[a] // unknown addresses and repeats add nothing
	}
	n := min(len(c.rule.Endpoints), 64)
	return (^uint64(0) >> (64 - n)) &^ inside
}

// eppAddrBits builds addrBits: an address listed twice (one engine
// sharing state) gets both endpoints' bits, as a hint naming it lets both
// be picked.
func (c *compiled) eppAddrBits() map[string]uint64 {
	m := make(map[string]uint64, len(c.rule.Endpoints))
	for i := range c.rule.Endpoints {
		m[c.eppAddr(i)] |= bit(i)
	}
	return m
}

// charge raises the in-flight count of the destination (and of the prefill
// of a P/D pair, as the proxy charges both legs) and returns the ticket
// Served settles.
func (c *compiled) charge(primary, prefill, bodyLen int) *eppTicket {
	t := &eppTicket{c: c, primary: primary, prefill: prefill, start: time.Now(), bytes: uint64(bodyLen), release: admitted}
	t.charged = append(t.charged, primary)
	if prefill >= 0 {
		t.charged = append(t.charged, prefill)
	}
	for _, i := range t.charged {
		c.eps[i].active.Add(1)
		c.epm[i].active.Inc()
	}
	return t
}

// Served settles a pick as the proxy's response path reported it: the
// in-flight counts drop, the breaker of the endpoint that served learns
// its status (a 5xx feeds the streak, any answer ends a connect-failure
// run and closes a half-open trial), and the request is counted like a
// proxied one. A proxy that fell back from the primary to another listed
// endpoint did so because the primary did not take the request: that
// counts as a connect failure of the primary. A pick with no response
// reported (the client left, or the proxy does not send the response path)
// gives its half-open trials back, as an abandoned proxied request does.
func (p *EPPPicker) Served(o epp.Outcome) {
	t, ok := o.Result.State.(*eppTicket)
	if !ok {
		return
	}
	t.release()
	t.settleFlow(o)
	t.placed.Done(0) // release the booking if no first chunk did (nil-safe, once)
	c := t.c
	for _, i := range t.charged {
		c.eps[i].active.Add(-1)
		c.epm[i].active.Dec()
	}
	served := t.primary
	if o.Endpoint != "" {
		if i := c.indexOfAddr(o.Endpoint); i >= 0 {
			served = i
		}
	}
	if c.cb.enabled {
		switch {
		case o.Status > 0:
			if served != t.primary {
				c.recordBreaker(t.primary, c.eps[t.primary].br.onDialFailure(&c.cb))
			}
			c.recordBreaker(served, c.eps[served].br.onResponse(&c.cb, o.Status))
		default:
			c.abandonTrial(t.primary)
		}
		if t.prefill >= 0 {
			// The sidecar ran the prefill; its verdict is folded into the
			// decode's status, so the prefill's own trial has none.
			c.abandonTrial(t.prefill)
		}
	}
	switch {
	case o.Status > 0:
		c.eps[served].requests.Add(1)
		c.eps[served].bytes.Add(t.bytes)
		c.countRequest(served, o.Status, "")
		if o.ResponseHeaders > 0 {
			c.ttfb.Observe(o.ResponseHeaders.Seconds())
		}
		if o.Complete {
			c.latency.Observe(time.Since(t.start).Seconds())
		}
	case o.Err != nil:
		c.countRequest(served, statusClientClosed, codeClientClosed)
	}
}

// indexOfAddr is the index of the endpoint with address addr ("ip:port"),
// -1 when none has it.
func (c *compiled) indexOfAddr(addr string) int {
	if b := c.addrBits[addr]; b != 0 {
		return bits.TrailingZeros64(b) // the first endpoint listed with it
	}
	for i := 64; i < len(c.rule.Endpoints); i++ { // past the 64th: no bit
		if c.eppAddr(i) == addr {
			return i
		}
	}
	return -1
}

// eppHTTPRequest rebuilds, from what the proxy sent, the request facts the
// datapath's selection reads: method, path and query, host, headers
// (canonical names, pseudo-headers dropped) and the client address (Envoy's
// x-envoy-external-address, else the first X-Forwarded-For hop), bound to
// the stream's context so a cancelled stream stops any tier's work.
func eppHTTPRequest(ctx context.Context, req *epp.Request, names *eppHeaderNames) *http.Request {
	h := make(http.Header, len(req.Headers))
	for k, vv := range req.Headers {
		if strings.HasPrefix(k, ":") {
			continue
		}
		h[names.canonical(k)] = vv
	}
	method := req.Headers.Get(":method")
	if method == "" {
		method = http.MethodGet
		if len(req.Body) > 0 {
			method = http.MethodPost
		}
	}
	target := req.Headers.Get(":path")
	u, err := url.ParseRequestURI(target)
	if err != nil {
		u = &url.URL{Path: "/"}
	}
	client := req.Headers.Get(eppHeaderExternalAddress)
	if client == "" {
		client, _, _ = strings.Cut(req.Headers.Get(eppHeaderForwardedFor), ",")
		client = strings.TrimSpace(client)
	}
	r := &http.Request{
		Method: method, URL: u, RequestURI: target, Header: h,
		Host: req.Headers.Get(":authority"), RemoteAddr: net.JoinHostPort(client, "0"),
	}
	return r.WithContext(ctx)
}

// eppHeaderNamesMax bounds the names eppHeaderNames remembers: a proxy
// sends a few dozen distinct ones; a client inventing names past the bound
// only costs their canonicalisation again.
const eppHeaderNamesMax = 256

// eppHeaderNames remembers the canonical form of the header names the proxy
// sends, so rebuilding a request's header does not allocate a string for
// every name net/textproto does not intern itself (x-request-id, the
// x-gateway-* hints, Envoy's x-envoy-*): one allocation a pick for each
// such name (BenchmarkEPPHTTPRequest, eppload's headers: 9 → 7).
// Copy-on-write, so a pick reads it with one atomic load and a map lookup.
type eppHeaderNames struct {
	m  atomic.Pointer[map[string]string]
	mu sync.Mutex // serialises additions
}

// canonical returns textproto.CanonicalMIMEHeaderKey(k).
func (n *eppHeaderNames) canonical(k string) string {
	if m := n.m.Load(); m != nil {
		if c, ok := (*m)[k]; ok {
			return c
		}
	}
	c := textproto.CanonicalMIMEHeaderKey(k)
	n.mu.Lock()
	defer n.mu.Unlock()
	var old map[string]string
	if p := n.m.Load(); p != nil {
		old = *p
	}
	if _, ok := old[k]; ok || len(old) >= eppHeaderNamesMax {
		return c
	}
	next := make(map[string]string, len(old)+1)
	for key, v := range old {
		next[key] = v
	}
	// The name may be a slice of the stream's receive buffer: copy it so
	// the table keeps no request alive.
	next[strings.Clone(k)] = strings.Clone(c)
	n.m.Store(&next)
	return c
}
