package datapath

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/infergate/infergate/datapath/flow"
	"github.com/infergate/infergate/datapath/ladder"
	"github.com/infergate/infergate/datapath/pick"
	"github.com/infergate/infergate/datapath/window"
)

// Flow control: per-endpoint admission windows and the rule's gateway
// queue (datapath/flow). A rule with an admission_window sends an endpoint
// at most its window of requests at a time; an endpoint at its window is
// not picked while another has room, and when every usable one is full the
// request waits in the queue (by class, fair between tenants, by deadline)
// or is answered 503 worker_overload_protection_shed with Retry-After.
// Rules without windows take none of these paths.

// Wire names of the request hints flow control reads.
const (
	// HeaderPriority asks for a priority class (low, standard, high or
	// 0..2); unknown values get the default class.
	HeaderPriority = "X-Request-Priority"
	// HeaderObjective is the Gateway API Inference Extension's objective
	// header; its value is read as a class name like HeaderPriority
	// (which wins when both are sent).
	HeaderObjective = "X-Gateway-Inference-Objective"
	// HeaderFairnessID names the fairness group of a request on a rule
	// without API keys (with keys, the key's tenant is the group).
	HeaderFairnessID = "X-Gateway-Inference-Fairness-Id"
	// HeaderSLOTTFT is the time-to-first-token deadline in milliseconds.
	HeaderSLOTTFT = "X-Slo-Ttft-Ms"
	// CodeOverloadShed is the 503 (with Retry-After) of a request the
	// gateway queue would not or could no longer hold: every endpoint is at
	// its admission window. SMG answers the same situation (every worker
	// over its ceiling, a P/D decode that could not admit within its wait)
	// with this code, so clients and dashboards keyed on it carry over.
	CodeOverloadShed = "worker_overload_protection_shed"
	// maxFairnessID bounds a client-chosen fairness id (longer ones are
	// cut: the id is a map key held while the request waits).
	maxFairnessID = 128
)

// Label values of infergate_flow_requests_total and the downgrade reasons.
const (
	flowDirect      = "direct"
	flowQueued      = "queued"
	flowShed        = "shed"
	flowClientGone  = "client_gone"
	downAboveGrant  = "above_grant"
	downUnknownName = "unknown_class"
)

// attachFlow gives a new generation its windows and queue. The queue is
// the rule key's (it outlives generations, like the endpoints); a window
// is the endpoint's and is resized in place, so requests in flight on the
// previous generation still count against it. A window is configured, or
// learned from the engine (enginewindow.go). A rule without windows gets
// neither. Control plane only (rt.mu).
func (rt *Runtime) attachFlow(rs *ruleState, c *compiled) {
	windowed := false
	for i := range c.rule.Endpoints {
		windowed = windowed || c.rule.WindowOf(i) > 0 || rt.learnsWindowOf(c.rule, i)
	}
	if !windowed {
		for _, ep := range c.eps {
			ep.win = nil
		}
		if rs.flow != nil {
			rs.flow.Release() // let a waiter of the last generation try at once
		}
		return
	}
	if rs.flow == nil {
		rs.flow = flow.New(rt.opts.Flow, rt.flowGauge(rs))
	}
	c.fq = rs.flow
	c.win = make([]*window.Window, len(c.eps))
	for i, ep := range c.eps {
		n, learned := rt.admissionOf(c, i)
		switch {
		case n == 0 && !learned:
			ep.win = nil
		case ep.win == nil:
			ep.win = window.NewResizable(n)
		default:
			ep.win.SetLimit(n)
		}
		c.win[i] = ep.win
	}
	c.fq.Release() // a larger window may have room for a waiter now
}

// flowGauge reports a rule's queue length per class on the rule's current
// label.
func (rt *Runtime) flowGauge(rs *ruleState) func(flow.Class, int) {
	return func(cl flow.Class, n int) {
		if c := rs.cur.Load(); c != nil {
			rt.fm.Queued.WithLabelValues(c.label, cl.String()).Set(float64(n))
		}
	}
}

// windowFull is the mask of endpoints at their window now.
func (c *compiled) windowFull() uint64 {
	var m uint64
	for i, w := range c.win {
		if w.Full() {
			m |= bit(i)
		}
	}
	return m
}

// waitsForWindow is the rule for "queue rather than give up": some endpoint
// outside excl that is usable is only at its window (full); without one
// nothing would ever free for this request.
func (c *compiled) waitsForWindow(excl, full uint64) bool {
	return full&^excl != 0 && c.anyUsable(excl|^full)
}

// heldSlots are the window slots one request holds (a P/D request: its
// prefill's and its decode's). release gives them back and tells the queue.
type heldSlots struct {
	rel [2]func()
	q   *flow.Queue
}

// take claims endpoint i's slot without waiting; false when it is full.
func (h *heldSlots) take(c *compiled, i int) bool {
	w := c.win[i]
	if w == nil {
		return true
	}
	rel, _, err := w.Acquire(context.Background(), 0) // no wait: only a free slot
	if err != nil {
		return false
	}
	for k := range h.rel {
		if h.rel[k] == nil {
			h.rel[k], h.q = rel, c.fq
			return true
		}
	}
	rel() // cannot happen: a request holds at most two
	return false
}

// release is inlined where it is deferred: a request that holds no slot
// (every request of a rule without windows) tests one word. take fills
// rel[0] first, so an empty rel[0] means nothing is held.
func (h *heldSlots) release() {
	if h.rel[0] != nil {
		h.releaseHeld()
	}
}

// releaseHeld gives back every slot h holds, out of release's line.
func (h *heldSlots) releaseHeld() {
	freed := false
	for k, rel := range h.rel {
		if rel != nil {
			rel()
			h.rel[k] = nil
			freed = true
		}
	}
	if freed {
		h.q.Release()
	}
}

// chooseAdmitted is choose under the rule's windows: the endpoint chosen
// among those with room, its slot taken into held; when every usable
// endpoint is at its window the request waits in the queue. shed true:
// the client has been answered (shed, or gone). What chose the endpoint
// goes to the request's observation (x.obs.picker).
//
// f and held stay on the caller's stack: the queue's callback gets heap
// copies, made only for a rule with windows and copied back once the
// queue is done with them (the callback runs only while admitFlow waits).
// Handing the callback f and held themselves would move both to the heap
// on every request, windows or not.
func (rt *Runtime) chooseAdmitted(x *exchange, c *compiled, f *pick.PoolFacts, body []byte, excl uint64, first bool, held *heldSlots) (int, uint64, *pick.Placed, bool) {
	if c.win == nil {
		i, excl, placed, by := rt.choose(c, f, x.r, body, excl, first)
		x.obs.picker = by
		return i, excl, placed, false
	}
	box := &struct {
		f    pick.PoolFacts
		held heldSlots
	}{*f, *held}
	wc := windowChoice{rt: rt, c: c, f: &box.f, r: x.r, body: body, excl: excl, first: first, held: &box.held, i: -1}
	admitted := rt.admitFlow(x, c, wc.try)
	*f, *held = box.f, box.held
	if !admitted {
		return -1, wc.excl, nil, true
	}
	x.obs.picker = wc.by
	return wc.i, wc.excl, wc.placed, false
}

// windowChoice is one request's choose under the rule's windows, shared
// by the proxy and the endpoint picker: try, the queue's dispatch attempt,
// chooses among the endpoints with room and takes the chosen one's slot.
// After a successful try, i is the choice (-1: nothing usable, and no
// full endpoint to wait for) and placed its cost booking.
type windowChoice struct {
	rt     *Runtime
	c      *compiled
	f      *pick.PoolFacts
	r      *http.Request
	body   []byte
	excl   uint64
	first  bool
	held   *heldSlots
	i      int
	placed *pick.Placed
	by     string // what chose i (the access log's tier)
}

func (w *windowChoice) try() bool {
	c := w.c
	for range len(c.eps) + 1 {
		full := c.windowFull()
		k, ex, p, by := w.rt.choose(c, w.f, w.r, w.body, w.excl|full, w.first)
		w.excl |= ex &^ full // endpoints lost to a half-open race stay out
		if k < 0 {
			return !c.waitsForWindow(w.excl, full)
		}
		if w.held.take(c, k) {
			w.i, w.placed, w.by = k, p, by
			return true
		}
		p.Done(0)         // the cost model's booking of a choice not taken
		c.abandonTrial(k) // its last slot went to another request: choose again
	}
	return false
}

// choosePairAdmitted is choosePair under the rule's windows (decodes and
// any endpoint with its own window): a pair whose slots are free, taken
// into held, else the queue. shed true: the client has been answered.
func (rt *Runtime) choosePairAdmitted(x *exchange, c *compiled, f *ladder.Facts, held *heldSlots) (pc pairChoice, pairDiff string, ok, shed bool) {
	if c.win == nil {
		pc, pairDiff, ok = c.choosePair(f, 0)
		return pc, pairDiff, ok, false
	}
	wp := windowPair{c: c, f: f, held: held}
	if !rt.admitFlow(x, c, wp.try) {
		return wp.pc, wp.pairDiff, false, true
	}
	return wp.pc, wp.pairDiff, wp.ok, false
}

// windowPair is choosePair under the rule's windows, shared by the proxy
// and the endpoint picker: try chooses a pair outside excl whose slots are
// free and takes them. After a successful try, ok says whether a pair was
// found (false: none usable, and no full endpoint to wait for).
type windowPair struct {
	c        *compiled
	f        *ladder.Facts
	excl     uint64
	held     *heldSlots
	pc       pairChoice
	pairDiff string
	ok       bool
}

func (w *windowPair) try() bool {
	c, held := w.c, w.held
	for range len(c.eps) + 1 {
		full := c.windowFull()
		w.pc, w.pairDiff, w.ok = c.choosePair(w.f, w.excl|full)
		if !w.ok {
			return !c.waitsForWindow(w.excl, full)
		}
		pi, di := w.pc.tr.Prefill.Index, w.pc.tr.Decode.Index
		if held.take(c, pi) {
			if held.take(c, di) {
				return true
			}
			held.release()
		}
		w.pc.tr.Placed.Done(0) // the cost model's booking of a pair not taken
		c.abandonTrial(pi)
		c.abandonTrial(di)
		w.ok = false
	}
	return false
}

// admitFlow runs try through the rule's queue (waitFlow); false when the
// request was shed (answered 503) or its client left.
func (rt *Runtime) admitFlow(x *exchange, c *compiled, try func() bool) bool {
	err := rt.waitFlow(x.r.Context(), c, rt.flowTicket(c, x.r.Header, x.key, x.start), try)
	var se *flow.ShedError
	switch {
	case err == nil:
		return true
	case errors.As(err, &se):
		x.w.Header().Set(headerRetryAfter, strconv.Itoa(int(se.RetryAfter/time.Second)))
		rt.fail(x, c, -1, http.StatusServiceUnavailable, CodeOverloadShed, shedMessage(se.Reason))
		return false
	}
	c.countRequest(-1, statusClientClosed, codeClientClosed)
	c.latency.Observe(x.finished().Seconds())
	return false
}

// waitFlow runs try through the rule's queue under tk and counts the
// outcome in the flow-control families, for the proxy and the endpoint
// picker alike. The error is nil (admitted), a *flow.ShedError (shed) or
// the context's (the client left while queued).
func (rt *Runtime) waitFlow(ctx context.Context, c *compiled, tk flow.Ticket, try func() bool) error {
	class := tk.Class.String()
	res, err := c.fq.Wait(ctx, tk, try)
	var se *flow.ShedError
	switch {
	case err == nil && !res.Queued:
		rt.fm.Requests.WithLabelValues(c.label, class, flowDirect).Inc()
	case err == nil:
		rt.fm.Requests.WithLabelValues(c.label, class, flowQueued).Inc()
		rt.fm.Wait.WithLabelValues(c.label, class).Observe(res.Wait.Seconds())
	case errors.As(err, &se):
		rt.fm.Requests.WithLabelValues(c.label, class, flowShed).Inc()
		rt.fm.Shed.WithLabelValues(c.label, class, se.Reason).Inc()
	default:
		rt.fm.Requests.WithLabelValues(c.label, class, flowClientGone).Inc()
	}
	return err
}

// noteLead tells the rule's queue how long a request took from dispatch to
// the engine's first byte (deadlines are shed that much early).
func (c *compiled) noteLead(d time.Duration) {
	if c.fq != nil {
		c.fq.ObserveLead(d)
	}
}

// shedMessage says why a request was shed.
func shedMessage(reason string) string {
	why := "every engine of this service is at its admission window"
	switch reason {
	case flow.ReasonQueueFull:
		why += " and the gateway queue is full"
	case flow.ReasonTimeout:
		why += " and the request waited the gateway queue's bound"
	case flow.ReasonDeadline:
		why += " and the request's x-slo-ttft-ms deadline cannot be met"
	case flow.ReasonDisplaced:
		why += " and a request of a higher priority class (or of a tenant with fewer queued) took this one's place"
	}
	return why + "; retry after the Retry-After delay"
}

// flowTicket is what the queue knows of a request with header h, API-key
// admission key (nil: none) and arrival start: its class (asked by
// header, never above its key's grant or, without a key, the gateway's),
// its fairness group (the key's tenant, else the client's fairness id)
// and its deadline (x-slo-ttft-ms from arrival, capped; ≤ 0 or not a
// number: none).
func (rt *Runtime) flowTicket(c *compiled, h http.Header, key *keyCheck, start time.Time) flow.Ticket {
	unkeyed, keyed := rt.opts.Flow.Ceilings()
	ceiling := unkeyed
	var tk flow.Ticket
	if key != nil {
		ceiling = keyed
		if g, ok := flow.ParseClass(key.adm.MaxPriority()); ok {
			ceiling = g
		}
		tk.Tenant = key.adm.TenantID()
	} else if id := h.Get(HeaderFairnessID); id != "" {
		tk.Tenant = id[:min(len(id), maxFairnessID)]
	}
	v := h.Get(HeaderPriority)
	if v == "" {
		v = h.Get(HeaderObjective)
	}
	asked, ok := flow.ParseClass(v)
	tk.Class = flow.Grant(asked, ok, ceiling)
	switch {
	case v != "" && !ok:
		rt.fm.Downgrades.WithLabelValues(c.label, downUnknownName).Inc()
	case ok && asked > tk.Class:
		rt.fm.Downgrades.WithLabelValues(c.label, downAboveGrant).Inc()
	}
	tk.Deadline = sloDeadline(h.Get(HeaderSLOTTFT), start, rt.opts.Flow.MaxDeadline)
	return tk
}

// sloDeadline is the rule for x-slo-ttft-ms: a positive whole number of
// milliseconds from arrival, capped at limit; anything else (absent,
// negative, zero, fractional, not a number, overflowing) is no deadline.
func sloDeadline(v string, start time.Time, limit time.Duration) time.Time {
	if v == "" {
		return time.Time{}
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) || ms <= 0 {
		return time.Time{}
	}
	d := limit
	if ms < int64(limit/time.Millisecond) {
		d = time.Duration(ms) * time.Millisecond
	}
	if d <= 0 {
		return time.Time{}
	}
	return start.Add(d)
}
