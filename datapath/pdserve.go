package datapath

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/infergate/infergate/datapath/ladder"
	"github.com/infergate/infergate/datapath/pd"
	"github.com/infergate/infergate/spec"
	"github.com/sirupsen/logrus"
)

// Wire names of the P/D session key (Tier 0).
const (
	headerConversationID = "X-Conversation-Id"
)

// Label values of the P/D families set here.
const (
	outcomeHit          = "hit"
	outcomeMiss         = "miss"
	legStatusNone       = "none" // infergate_pd_leg_requests_total: no engine answer
	reasonNoPair        = "no_usable_pair"
	reasonNoRole0       = "no_usable_role0"
	CodePoolUnavailable = pd.CodePoolUnavailable // 503: no usable pair and no role-0 endpoint
)

// requestIdentity reads what routing keys on from a P/D or CHWBL request:
// the model (X-Model header, else body "model") and the session key
// (X-Conversation-Id header, else body "user"). b is the body's one
// top-level scan, which also serves the prompt key.
func requestIdentity(h http.Header, b ladder.BodyFields) (model, session string) {
	model = h.Get(HeaderModel)
	if model == "" {
		model = jsonString(b.Model)
	}
	session = h.Get(headerConversationID)
	if session == "" {
		session = jsonString(b.User)
	}
	return model, session
}

// jsonString returns raw as a Go string when it is a JSON string, else "".
func jsonString(raw json.RawMessage) string {
	if len(raw) == 0 || raw[0] != '"' {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

// pdCandidates lists the usable prefill and decode endpoints with their
// load (in-flight requests, each P/D request charging both of its legs).
func (c *compiled) pdCandidates(excl uint64) (prefills, decodes []ladder.Candidate) {
	var now int64
	var wall time.Time
	for i, e := range c.rule.Endpoints {
		if e.Role != spec.RolePrefill && e.Role != spec.RoleDecode {
			continue
		}
		if !c.usable(i, excl, &now) || c.firstIndex(c.eps[i]) != i {
			continue
		}
		cand := ladder.Candidate{ID: e.ID, Index: i, Load: int(c.eps[i].active.Load()), Engine: c.eps[i].engineLoad(&wall)}
		if e.Role == spec.RolePrefill {
			prefills = append(prefills, cand)
		} else {
			decodes = append(decodes, cand)
		}
	}
	return prefills, decodes
}

// roleMask is the exclusion mask of every endpoint not in role: handing it
// to the single-pool path restricts that path to role.
func (c *compiled) roleMask(role spec.Role) uint64 {
	var m uint64
	for i, e := range c.rule.Endpoints {
		if e.Role != role {
			m |= bit(i)
		}
	}
	return m
}

// anyUsable reports whether some endpoint outside excl may take a request.
func (c *compiled) anyUsable(excl uint64) bool {
	var now int64
	for i := range c.eps {
		if c.usable(i, excl, &now) {
			return true
		}
	}
	return false
}

// servePD routes a P/D request by its path (pdRouteFor): generation APIs
// whose transfer the engine supports run the P/D sequence; side paths
// (tokenize, embeddings, models, …) and generation APIs without transfer
// go to one endpoint, counted in infergate_pd_unsplit_requests_total;
// anything else is refused with pd_path_unsupported. Every path first
// refuses a client request id with vLLM's peer markers (guardPDRequest),
// and every body that skips the dialect goes through
// stripClientTransferState. For the sequence the ladder picks a (prefill,
// decode) pair among usable endpoints, the engine's dialect runs it, and
// the outcome feeds metrics and the breakers; with no usable pair a role-0
// endpoint serves the request unsplit, and without one the answer is 503
// pd_pool_unavailable.
func (rt *Runtime) servePD(x *exchange, c *compiled, body []byte) {
	p := c.pd
	if !rt.guardPDRequest(x, c) {
		return
	}
	route := c.pdRoute(x.r.Method, x.r.URL.Path)
	switch route.kind {
	case pdRefused:
		rt.fail(x, c, -1, http.StatusNotFound, CodePDPathRefused,
			"a prefill/decode rule serves the generation APIs and their side paths only; "+strconvQuote(x.r.URL.Path)+" is not one of them")
		return
	case pdOne:
		if !rt.refuseMoRIIOUnsplit(x, c, route) { // pdmoriio.go
			rt.servePDOne(x, c, body, route)
		}
		return
	}
	if len(body) == 0 {
		rt.fail(x, c, -1, http.StatusBadRequest, pd.CodeInvalidBody,
			"POST "+x.r.URL.Path+" on a prefill/decode rule needs a JSON object body")
		return
	}
	// Client transfer state in body is removed by the dialect's own rewrite.
	f := rt.pdFacts(c, x.r, body)
	defer c.releaseFacts(&f)
	var held heldSlots // admission window slots (flowgate.go)
	defer held.release()
	pc, pairDiff, ok, shed := rt.choosePairAdmitted(x, c, &f, &held)
	if shed {
		return
	}
	if ok && rt.refuseLongPrompt(x, c, &f, &pc) { // contextlen.go
		return
	}
	if ok {
		rt.countLadder(c, pc.tr.Steps)
		rt.runPD(x, c, body, &pc.tr, pc.prefills, pc.decodes, f.Model)
		return
	}
	role0 := c.roleMask(spec.RoleAny)
	if p.hasRole0 && c.anyUsable(role0) {
		rt.pdm.FallbackToNormal.WithLabelValues(c.label).Inc()
		rt.pdm.LadderDecisions.WithLabelValues(c.label, ladder.TierFallback, outcomeHit, reasonNoPair).Inc()
		x.obs.tier = ladder.TierFallback
		if body, ok := rt.stripClientTransferState(x, c, body); ok {
			rt.serveSingleExcl(x, c, body, role0, singleSend{})
		}
		return
	}
	rt.pdm.LadderDecisions.WithLabelValues(c.label, ladder.TierFallback, outcomeMiss, reasonNoRole0).Inc()
	if pairDiff != "" {
		rt.warnNoPair(c, pairDiff)
		rt.fail(x, c, -1, http.StatusServiceUnavailable, CodeNoCompatiblePDPair,
			"no compatible prefill/decode pair: "+pairDiff)
		return
	}
	rt.fail(x, c, -1, http.StatusServiceUnavailable, CodePoolUnavailable,
		"no usable prefill/decode pair (endpoints down, draining or circuit-broken) and no role-0 endpoint")
}

// servePDOne sends a P/D rule's request to one endpoint of route.role
// without a sequence (falling back to any usable endpoint unless strict),
// with its own method. A body read for routing goes through
// stripClientTransferState; an upload that is not JSON streams through.
func (rt *Runtime) servePDOne(x *exchange, c *compiled, body []byte, route pdRoute) {
	if body != nil {
		var ok bool
		if body, ok = rt.stripClientTransferState(x, c, body); !ok {
			return
		}
	}
	excl := c.roleMask(route.role)
	if !c.anyUsable(excl) {
		if route.strict {
			rt.fail(x, c, -1, http.StatusNotImplemented, CodePDPathRefused,
				"engine "+string(c.rule.Engine)+" cannot serve "+x.r.URL.Path+" through prefill/decode and the rule has no usable role-0 endpoint")
			return
		}
		excl = 0
	}
	if rt.pdm.Unsplit != nil {
		rt.pdm.Unsplit.WithLabelValues(c.label, unsplitPathLabel(x.r.URL.Path), route.reason).Inc()
	}
	rt.serveSingleExcl(x, c, body, excl, singleSend{})
}

// unsplitPathLabel bounds the path label to the known API paths.
func unsplitPathLabel(path string) string {
	if isGenerationPath(path) {
		return path
	}
	if _, ok := sidePathRole(path); ok {
		if strings.HasPrefix(path, pathModels+"/") {
			return pathModels + "/*"
		}
		return path
	}
	return "other"
}

// admitPD claims endpoint i's breaker slot (the half-open trial when its
// open window is over).
func (c *compiled) admitPD(i int) bool {
	if !c.cb.enabled {
		return true
	}
	ok, to := c.eps[i].br.admit()
	c.recordBreaker(i, to)
	return ok
}

// abandonTrial ends a half-open trial that never sent anything: the next
// request may try again at once.
func (c *compiled) abandonTrial(i int) {
	if c.cb.enabled {
		c.recordBreaker(i, c.eps[i].br.onAbandon(&c.cb, true))
	}
}

// countLadder turns a decision's trace into metrics.
func (rt *Runtime) countLadder(c *compiled, steps []ladder.Step) {
	for _, s := range steps {
		outcome := outcomeMiss
		if s.Hit {
			outcome = outcomeHit
			if s.Tier == ladder.TierSession {
				rt.pdm.SessionHits.WithLabelValues(c.label).Inc()
			}
		}
		c.pdc.ladder.get(rt.pdm.LadderDecisions, c.label, [3]string{s.Tier, outcome, s.Reason}).Inc()
	}
}

// runPD serves one request on the chosen pair.
func (rt *Runtime) runPD(x *exchange, c *compiled, body []byte, tr *ladder.Trace, prefills, decodes []ladder.Candidate, model string) {
	r := x.r
	pi, di := tr.Prefill.Index, tr.Decode.Index
	pair := pd.Pair{
		Prefill:    c.rule.Endpoints[pi],
		Decode:     c.rule.Endpoints[di],
		AltPrefill: c.pairable(c.alternates(prefills, pi), di, spec.RolePrefill), // pdpair.go
		AltDecode:  c.pairable(c.alternates(decodes, di), pi, spec.RoleDecode),

		PrefillDPRank: tr.PrefillRank, HasPrefillDPRank: tr.HasPrefillRank,
		Unsplit: c.unsplitPossible(), // pdfallback.go
	}
	for _, i := range [2]int{pi, di} {
		c.eps[i].active.Add(1)
		c.epm[i].active.Inc()
	}
	defer func() {
		for _, i := range [2]int{pi, di} {
			c.eps[i].active.Add(-1)
			c.epm[i].active.Dec()
		}
	}()
	prepareOutboundHeader(r.Header, clientIP(r.RemoteAddr), rt.opts.TrustForwardedFor)

	ctx := r.Context()
	capD := c.rule.MaxStreamDuration
	if capD <= 0 {
		capD = rt.opts.MaxStreamDuration
	}
	if capD > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, capD)
		defer cancel()
	}
	rt.recheckEngineID(ctx, c, pi) // mooncakeid.go: after a failed handoff
	req := &pd.Request{Path: r.URL.Path, Header: r.Header, Body: body, RequestID: x.requestID, Rule: c.rule, EngineIDs: c}
	x.wroteHeader = true // the dialect answers the client, success or error
	o := c.pd.dialect.Serve(ctx, &idWriter{ResponseWriter: x.w, id: x.requestID}, req, pair, c.pd.sender)
	if prefillTeaches(&o) { // release its cost backlog; a good prefill's time is learned
		tr.Placed.Prefilled(o.Prefill)
	} else {
		tr.Placed.Done(0)
	}
	if o.DecodeUnreachable {
		rt.serveDecodeUnreachable(x, c, body, &o, pi, di)
		return
	}

	modelLabel := c.pd.models.Label(model, o.Status >= 200 && o.Status < 300)
	pd.Record(rt.pdm, c.label, modelLabel, o)
	rt.observeClientTTFT(c, modelLabel, x)
	if o.PrefillSkipped != "" && rt.pdm.Unsplit != nil {
		rt.pdm.Unsplit.WithLabelValues(c.label, unsplitPathLabel(r.URL.Path), o.PrefillSkipped).Inc()
	}
	if pd.IsRequestIDReserved(o.Code) { // a body request_id with peer markers
		rt.pdm.ClientTransferState.WithLabelValues(c.label, actionRequestIDRejected).Inc()
	}
	if o.ClientTransferFields > 0 {
		rt.pdm.ClientTransferState.WithLabelValues(c.label, actionFieldStripped).Add(float64(o.ClientTransferFields))
	}
	rt.feedLegs(c, &o, pi, di)
	c.noteMooncakeOutcome(&o) // mooncakeid.go
	served := c.chargedEndpoint(&o, di)
	x.obs.pdServed(c, tr, &o, model, served)
	// Charged to the engine that answered (chargedEndpoint): after a decode
	// failover the first choice never got the request.
	c.eps[served].bytes.Add(uint64(len(body)) + uint64(x.obs.clock.Bytes()))
	switch {
	case o.ClientGone:
		c.countRequest(served, statusClientClosed, codeClientClosed)
	default:
		c.countRequest(served, o.Status, o.Code)
	}
	if o.DecodeTTFB > 0 {
		c.ttfb.Observe((o.Prefill + o.DecodeTTFB).Seconds())
		c.noteLead(o.Prefill + o.DecodeTTFB) // flowgate.go
	}
	c.latency.Observe(x.finished().Seconds())
	if o.Code != "" && !o.ClientGone {
		rt.log.WithFields(logrus.Fields{
			"rule": c.label, "request_id": x.requestID, "code": o.Code, "phase": string(o.FailedPhase),
			"prefill": pair.Prefill.ID, "decode": pair.Decode.ID,
		}).Warn("P/D request failed")
	}
	if o.StreamCut {
		// A clean end would make a truncated stream look complete.
		panic(http.ErrAbortHandler)
	}
}

// alternates are the candidates other than the chosen index, least loaded
// first: the endpoints a dialect may fail over to.
func (c *compiled) alternates(cands []ladder.Candidate, chosen int) []spec.Endpoint {
	var out []spec.Endpoint
	for _, k := range othersByLoad(cands, chosen) {
		out = append(out, c.rule.Endpoints[k.Index])
	}
	return out
}

// othersByLoad is a copy of cands without the chosen index, least loaded
// first (ties in their order).
func othersByLoad(cands []ladder.Candidate, chosen int) []ladder.Candidate {
	alt := slices.DeleteFunc(slices.Clone(cands), func(k ladder.Candidate) bool { return k.Index == chosen })
	slices.SortStableFunc(alt, func(a, b ladder.Candidate) int { return a.Load - b.Load })
	return alt
}

// prefillTeaches reports whether o's prefill time is what the cost model
// learns from (per-token cost, backlog share): the booked prefill's own
// answer to the whole prompt. Not an instant refusal relayed from an
// engine, not the alternate's time after a prefill failover (credited to
// the booked endpoint), not a leg whose transfer failed, not a request
// whose prefill leg was skipped — each would teach a time that means
// something else and drag the learned costs towards it.
func prefillTeaches(o *pd.Outcome) bool {
	return o.Code == "" && o.Status >= 200 && o.Status < 300 && o.Prefill > 0 &&
		!o.Relayed && !o.PrefillFailover && !o.KVTransferFailed && o.PrefillSkipped == ""
}

// chargedEndpoint is the index of the endpoint the request is charged to
// (its requests_total series, bytes, the access log's endpoint): the last
// decode leg's that answers for the request (a decode failover moves it);
// with none — a handoff refused, a prefill that failed, a TensorRT-LLM
// early exit, an SGLang decode cancelled when its prefill failed — the
// last other leg's, the engine that decided the answer; with no leg at
// all, di.
func (c *compiled) chargedEndpoint(o *pd.Outcome, di int) int {
	for k := len(o.Legs) - 1; k >= 0; k-- {
		if o.Legs[k].Phase == pd.PhaseDecode && !cancelledBySibling(o, &o.Legs[k]) {
			if i := c.indexOf(o.Legs[k].Endpoint.ID); i >= 0 {
				return i
			}
			return di
		}
	}
	for k := len(o.Legs) - 1; k >= 0; k-- {
		if !cancelledBySibling(o, &o.Legs[k]) {
			if i := c.indexOf(o.Legs[k].Endpoint.ID); i >= 0 {
				return i
			}
			break
		}
	}
	return di
}

// cancelledBySibling reports whether l is a decode leg that did not answer
// for the request: the gateway cancelled it before it produced a status,
// and the failure that decided the answer was the prefill's. SGLang sends
// both legs at once, so a prefill that refuses (4xx relayed) or fails
// cancels a decode that was already in flight; charging that decode would
// bill an engine for an answer it never gave. A leg the client's leaving
// cancelled was not cancelled by its sibling (MoRI-IO's decode, sent beside
// its prefill, is charged as before), and a prefill leg is never skipped:
// one cancelled because the client left (vLLM, TensorRT-LLM: no decode
// sent yet) is the engine the request reached.
func cancelledBySibling(o *pd.Outcome, l *pd.LegResult) bool {
	return l.Phase == pd.PhaseDecode && l.Cancelled && l.Status == 0 && o.FailedPhase == pd.PhasePrefill && !o.ClientGone
}

// feedLegs counts every leg and feeds the endpoint breakers: a connect
// failure counts towards opening, a death after connecting or a timeout
// counts as an engine error (5xx streak), an answer resets the connect
// count and feeds the streak by its status. A half-open trial that sent no
// leg (its sibling failed first, or it waited out its bound for a free
// connection) is abandoned so the next request retries.
func (rt *Runtime) feedLegs(c *compiled, o *pd.Outcome, admitted ...int) {
	seen := make(map[int]bool, len(o.Legs))
	for _, l := range o.Legs {
		i := c.indexOf(l.Endpoint.ID)
		status := legStatusNone
		if l.Status > 0 {
			status = strconv.Itoa(l.Status)
		}
		c.pdc.legs.get(rt.pdm.LegRequests, c.label, [3]string{l.Endpoint.ID, string(l.Phase), status}).Inc()
		if i >= 0 && !l.NotSent && !l.PoolWait {
			c.eps[i].requests.Add(1)
		}
		if i < 0 || !c.cb.enabled {
			continue
		}
		seen[i] = true
		br := &c.eps[i].br
		to := int32(-1)
		switch {
		case l.PoolWait: // never sent: the gateway's own cap, not the engine
			to = br.onAbandon(&c.cb, true)
		case l.NotSent:
			to = br.onDialFailure(&c.cb)
		case l.TimedOut:
			to = br.onResponse(&c.cb, http.StatusGatewayTimeout)
		case l.Died:
			to = br.onResponse(&c.cb, http.StatusBadGateway)
		case l.Status > 0:
			to = br.onResponse(&c.cb, l.Status)
		case l.Cancelled:
			to = br.onAbandon(&c.cb, true)
		}
		c.recordBreaker(i, to)
	}
	for _, i := range admitted {
		if !seen[i] {
			c.abandonTrial(i)
		}
	}
}

// indexOf is the index of endpoint id in this generation, -1 if absent.
func (c *compiled) indexOf(id string) int {
	for i, ep := range c.eps {
		if ep.id == id {
			return i
		}
	}
	return -1
}

// pdStatus is a P/D rule's readiness: ready only with at least one usable
// prefill and one usable decode that may pair (pdpair.go; a role-0
// endpoint keeps traffic flowing but is a degraded mode, so it does not
// make the rule ready).
func (c *compiled) pdStatus(st *spec.RuleStatus) {
	prefills, decodes := c.pdCandidates(0)
	switch {
	case c.pd == nil || c.pd.dialect == nil:
		st.Reason = "engine " + strconv.Quote(string(c.rule.Engine)) + " has no prefill/decode sequence"
	case len(prefills) > 0 && len(decodes) > 0:
		if ok, diff := c.usablePair(prefills, decodes); !ok {
			st.Reason = "no compatible prefill/decode pair among the usable endpoints: " + diff
			break
		}
		st.Ready = true
	case len(prefills) == 0 && len(decodes) == 0:
		st.Reason = "no usable prefill and no usable decode endpoint"
	case len(prefills) == 0:
		st.Reason = "no usable prefill endpoint"
	default:
		st.Reason = "no usable decode endpoint"
	}
}

// idWriter gives the client its own X-Request-Id whatever the dialect
// copies from the engine (vLLM's decode echoes the NIXL id it was sent).
type idWriter struct {
	http.ResponseWriter
	id   string
	sent bool // the final header is out: a stream's writes set nothing more
}

func (w *idWriter) WriteHeader(status int) {
	w.ResponseWriter.Header()[HeaderRequestID] = []string{w.id}
	w.sent = w.sent || status >= 200
	w.ResponseWriter.WriteHeader(status)
}

func (w *idWriter) Write(b []byte) (int, error) {
	if !w.sent { // net/http's implicit 200
		w.ResponseWriter.Header()[HeaderRequestID] = []string{w.id}
		w.sent = true
	}
	return w.ResponseWriter.Write(b)
}

func (w *idWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (w *idWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
