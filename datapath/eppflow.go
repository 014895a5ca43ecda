package datapath

import (
	"errors"
	"net/http"
	"time"

	"github.com/infergate/infergate/datapath/flow"
	"github.com/infergate/infergate/datapath/ladder"
	"github.com/infergate/infergate/datapath/pick"
	"github.com/infergate/infergate/epp"
)

// Flow control on the endpoint-picker path. A pick on a rule with
// admission windows holds its endpoint's window slot (both legs' for a
// P/D pair, as the proxy holds them) from the pick until the ext_proc
// stream ends, so requests sent through the gateway in front count against
// the same windows as proxied ones. When every usable endpoint is at its
// window the pick waits in the rule's own queue — the one proxied requests
// wait in, with the same classes, tenants and deadlines — and a shed is
// the EPP's 429 with the queue's reason and Retry-After, which the Gateway
// API Inference Extension's protocol asks of a saturated pool.

// eppGate is what one EPP pick carries through flow control: when the
// request arrived (its x-slo-ttft-ms deadline counts from then) and the
// window slots it took, which its ticket holds until Served.
type eppGate struct {
	start time.Time
	held  heldSlots
}

// eppChooseAdmitted is eppPickSingle's choose, under the rule's windows
// when it has them (windowChoice through the rule's queue), as
// chooseAdmitted is the proxy's. A shed is a 429 refusal; a stream that
// ends while queued returns its context's error. placed is the cost
// model's booking of the choice (nil when the cost model did not place
// it), for the ticket to settle (epplearn.go).
func (rt *Runtime) eppChooseAdmitted(g *eppGate, c *compiled, f *pick.PoolFacts, r *http.Request, body []byte, excl uint64) (int, uint64, *pick.Placed, error) {
	if c.win == nil {
		i, excl, placed, _ := rt.choose(c, f, r, body, excl, true)
		return i, excl, placed, nil
	}
	wc := windowChoice{rt: rt, c: c, f: f, r: r, body: body, excl: excl, first: true, held: &g.held, i: -1}
	if err := rt.eppAdmitFlow(g, c, r, wc.try); err != nil {
		return -1, wc.excl, nil, err
	}
	return wc.i, wc.excl, wc.placed, nil
}

// eppChoosePairAdmitted is eppPickPD's choosePair, under the rule's
// windows when it has them (windowPair through the rule's queue), as
// choosePairAdmitted is the proxy's; excl restricts the decodes to the
// subset hint.
func (rt *Runtime) eppChoosePairAdmitted(g *eppGate, c *compiled, f *ladder.Facts, r *http.Request, excl uint64) (pairChoice, string, bool, error) {
	if c.win == nil {
		pc, pairDiff, ok := c.choosePair(f, excl)
		return pc, pairDiff, ok, nil
	}
	wp := windowPair{c: c, f: f, excl: excl, held: &g.held}
	if err := rt.eppAdmitFlow(g, c, r, wp.try); err != nil {
		return wp.pc, wp.pairDiff, false, err
	}
	return wp.pc, wp.pairDiff, wp.ok, nil
}

// eppAdmitFlow runs try through the rule's queue (waitFlow); a shed is
// the EPP's 429 refusal. The ticket is read from the same headers as a
// proxied request's (x-request-priority, else
// x-gateway-inference-objective; the fairness id; x-slo-ttft-ms from
// arrival) under the ceiling of requests without an API key, since in
// this mode the gateway in front authenticates and the EPP checks no keys.
func (rt *Runtime) eppAdmitFlow(g *eppGate, c *compiled, r *http.Request, try func() bool) error {
	err := rt.waitFlow(r.Context(), c, rt.flowTicket(c, r.Header, nil, g.start), try)
	var se *flow.ShedError
	if errors.As(err, &se) {
		return &epp.Refusal{Status: http.StatusTooManyRequests, Reason: se.Reason, RetryAfter: se.RetryAfter}
	}
	return err
}

// settleFlow gives a settled pick's window slots back (waking the queue)
// and, for a 200, tells the queue how long the engine took from the pick
// to its response headers, the lead deadlines are shed early by.
func (t *eppTicket) settleFlow(o epp.Outcome) {
	t.held.release()
	if o.Status == http.StatusOK && o.ResponseHeaders > 0 {
		t.c.noteLead(o.ResponseHeaders)
	}
}
