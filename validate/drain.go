package validate

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/infergate/infergate/rules"
)

// restoreTimeout bounds putting the original rule back; it runs on a
// context detached from the caller's so Ctrl-C never leaves a drain behind.
const restoreTimeout = 15 * time.Second

// drain sets one endpoint at a time to weight 0, checks it gets no traffic
// while the others do, restores the rule and checks traffic returns.
func (w *workflow) drain(ctx context.Context, res *StepResult) {
	fam, sel, ok := w.disruptiveFamily(ctx, res, "drain")
	if !ok {
		return
	}
	orig := rules.SpecOnly(*w.rule)
	drained, interrupted := w.disruptEach(ctx, res, orig, "drained", nil, func(i int, _ string) ([]string, Status, bool, bool) {
		ev, st, restoredOK := w.drainOne(ctx, orig, i, fam, sel)
		return ev, st, restoredOK, true
	})
	if interrupted {
		return
	}
	switch {
	case drained == 0:
		res.Status, res.Summary = Skip, "no endpoint can be drained without emptying its role"
	case res.Status == Pass:
		res.Summary = fmt.Sprintf("%d endpoints drained and restored; traffic moved to peers and each is back in rotation", drained)
	case res.Status == Warn:
		res.Summary = fmt.Sprintf("%d endpoints drained and restored; some got no traffic back right away", drained)
		res.Hints = []Hint{HintRoleOverloaded}
	default:
		res.Summary = "traffic did not move as expected on drain/restore"
		res.Hints = []Hint{HintRoleOverloaded, HintBreaker}
	}
}

// disruptiveFamily is the per-endpoint request family (and its rule
// selector) a disruptive step attributes traffic with; ok is false, with
// res filled, when the run is not disruptive or the gateway exports no
// such family. verb names the step's action in the skip message.
func (w *workflow) disruptiveFamily(ctx context.Context, res *StepResult, verb string) (fam string, sel Labels, ok bool) {
	if !w.opts.Disruptive {
		res.Status, res.Summary = Skip, "not disruptive (pass --disruptive to "+verb+" each endpoint in turn)"
		return "", nil, false
	}
	fam, sel = famDPRequests, Labels{labelRule: w.label}
	if w.compiled.isPD() {
		fam = famLegRequests
	}
	snap, err := w.scrape(ctx)
	if err != nil {
		res.Status, res.Summary = Fail, err.Error()
		return "", nil, false
	}
	if !snap.Has(fam) {
		res.Status, res.Summary = Skip, "no per-endpoint request family ("+fam+") to attribute traffic"
		return "", nil, false
	}
	return fam, sel, true
}

// drainOne drains endpoint i of orig, probes, restores (always), probes.
func (w *workflow) drainOne(ctx context.Context, orig rules.Rule, i int, fam string, sel Labels) (ev []string, st Status, restoredOK bool) {
	id := net.JoinHostPort(orig.Endpoints[i].EndpointIP, strconv.Itoa(orig.Endpoints[i].TargetPort))
	drainedRule := rules.SpecOnly(orig)
	drainedRule.Endpoints = append([]rules.Endpoint(nil), orig.Endpoints...)
	drainedRule.Endpoints[i].Weight = 0
	restore := w.restoreOnce(ctx, orig, id, "drain", &ev, &st, &restoredOK)
	defer restore()
	if _, err := w.api.Apply(ctx, drainedRule); err != nil {
		restore() // the drain may have been applied before the error
		return append(ev, fmt.Sprintf("%s: drain failed: %v", id, err)), Fail, restoredOK
	}
	during := w.probeDelta(ctx, fam, sel)
	restore()
	if st == Fail || ctx.Err() != nil {
		return ev, st, restoredOK
	}
	after := w.probeDelta(ctx, fam, sel)
	ev = append(ev, fmt.Sprintf("%s drained: %s", id, formatDeltas(during)), fmt.Sprintf("%s restored: %s", id, formatDeltas(after)))
	others := 0.0
	for ep, v := range during {
		if ep != id {
			others += v
		}
	}
	switch {
	case during[id] > 0:
		return append(ev, id+": FAIL, the drained endpoint kept getting traffic"), Fail, true
	case others == 0:
		return append(ev, id+": FAIL, no peer took the traffic while it was drained"), Fail, true
	}
	more, st := w.backInRotation(ctx, orig, id, after)
	return append(ev, more...), st, true
}

// restoreRule re-applies orig on a context detached from the caller's, so
// Ctrl-C never leaves a drained or failed endpoint behind.
func (w *workflow) restoreRule(ctx context.Context, orig rules.Rule) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), restoreTimeout)
	defer cancel()
	_, err := w.api.Apply(rctx, orig)
	return err
}

// backInRotation checks endpoint id after orig was restored; after is the
// restore probes' per-endpoint deltas. Back in rotation is what the
// runtime reports; whether one of a few sequential probes lands on it
// depends on affinity and load ties.
func (w *workflow) backInRotation(ctx context.Context, orig rules.Rule, id string, after map[string]float64) ([]string, Status) {
	var ev []string
	if es, found := w.endpointStatus(ctx, orig, id); found {
		state := es.State
		if state == "draining" || state == "" {
			return append(ev, fmt.Sprintf("%s: FAIL, runtime state %q after the restore", id, state)), Fail
		}
		if after[id] == 0 {
			ev = append(ev, fmt.Sprintf("%s: back in rotation (state %s); no restore probe landed on it (affinity or load ties)", id, state))
		}
		return ev, Pass
	}
	if after[id] == 0 {
		return append(ev, id+": WARN, restored but no probe came back to it and no runtime status to confirm"), Warn
	}
	return ev, Pass
}

// endpointStatus is endpoint id's entry in the rule's runtime status;
// found is false when the status could not be read (an entry the runtime
// does not list reads as found with an empty state).
func (w *workflow) endpointStatus(ctx context.Context, r rules.Rule, id string) (es endpointState, found bool) {
	var sv statusView
	found, err := getJSON(ctx, w.apiHC, strings.TrimRight(w.opts.Server, "/")+keyPath(r)+suffixStatus, &sv)
	if err != nil || !found {
		return es, false
	}
	return sv.Endpoints[id], true
}

// probeDelta sends Probes requests and returns the per-endpoint counter deltas.
func (w *workflow) probeDelta(ctx context.Context, fam string, sel Labels) map[string]float64 {
	d, _ := w.probeDeltaChecked(ctx, fam, sel)
	return d
}

// probeDeltaChecked is probeDelta that also counts the probes not answered
// with a 2xx.
func (w *workflow) probeDeltaChecked(ctx context.Context, fam string, sel Labels) (d map[string]float64, bad int) {
	before, err := w.scrape(ctx)
	if err != nil {
		return nil, 0
	}
	for i := 0; i < w.opts.Probes; i++ {
		if r := w.send(ctx, spreadPrompt(i), false); r.err != nil || r.status/100 != 2 {
			bad++
		}
	}
	want := float64(w.opts.Probes)
	after, err := w.awaitScrape(ctx, func(s *Snapshot) bool { return s.Sum(fam, sel)-before.Sum(fam, sel) >= want })
	if err != nil {
		return nil, bad
	}
	return deltaBy(before, after, fam, labelEndpoint, sel), bad
}

// spreadPrompt is probe i's prompt. Prompts differ from their first byte,
// so no prefix or KV affinity pins them: they spread by load.
func spreadPrompt(i int) string {
	return fmt.Sprintf("%x-%d: infergate validate drain probe", time.Now().UnixNano()+int64(i)*7919, i)
}

func roleOf(epRole int) string {
	switch epRole {
	case 1:
		return rolePrefill
	case 2:
		return roleDecode
	}
	return "any"
}

func countRole(r rules.Rule, epRole int) int {
	n := 0
	for _, e := range r.Endpoints {
		if e.EPRole == epRole && e.Weight > 0 {
			n++
		}
	}
	return n
}

// restoreOnce returns a function that re-applies orig the first time it is
// called: a disruptive step defers it and may call it early. A failed
// restore is added to *ev and makes *st Fail; *ok reports one that worked.
func (w *workflow) restoreOnce(ctx context.Context, orig rules.Rule, id, after string, ev *[]string, st *Status, ok *bool) func() {
	done := false
	return func() {
		if done {
			return
		}
		done = true
		if err := w.restoreRule(ctx, orig); err != nil {
			*ev = append(*ev, fmt.Sprintf("%s: RESTORE FAILED: %v — re-apply the rule by hand", id, err))
			*st = Fail
			w.opts.Log.WithError(err).WithField("endpoint", id).Error("validate: restore after " + after + " failed")
			return
		}
		*ok = true
	}
}

// loneRule decides whether a step may act on endpoint i of r although it
// is the only usable one of its role: why is "" to act, else the reason it
// is left alone (appended to the evidence), with the status that earns.
type loneRule func(r rules.Rule, i int) (why string, st Status)

// disruptEach runs a disruptive step's action on each serving endpoint that
// has a peer in its role (or that lone allows; nil: none), one at a time,
// folding the outcomes into res (the worst status wins). act returns the action's evidence, status,
// whether the rule was restored, and acted=false when it left the endpoint
// alone (its evidence says why). It stops at an interrupt and then writes
// the verdict itself (interrupted=true); past names the action ("drained").
func (w *workflow) disruptEach(ctx context.Context, res *StepResult, orig rules.Rule, past string, lone loneRule,
	act func(i int, id string) (ev []string, st Status, restoredOK, acted bool)) (n int, interrupted bool) {
	res.Status = Pass
	restoreFailed := false
	for i, e := range orig.Endpoints {
		if e.Weight == 0 {
			continue
		}
		id := net.JoinHostPort(e.EndpointIP, strconv.Itoa(e.TargetPort))
		if countRole(orig, e.EPRole) < 2 {
			why, st := "", Pass
			if lone != nil {
				why, st = lone(orig, i)
			}
			if why != "" || lone == nil {
				res.Evidence = append(res.Evidence, fmt.Sprintf("%s: only %s endpoint, not %s%s", id, roleOf(e.EPRole), past, why))
				if rank(st) > rank(res.Status) {
					res.Status = st
				}
				continue
			}
		}
		ev, st, restoredOK, acted := act(i, id)
		res.Evidence = append(res.Evidence, ev...)
		if !acted {
			continue
		}
		n++
		restoreFailed = restoreFailed || !restoredOK
		if rank(st) > rank(res.Status) {
			res.Status = st
		}
		if ctx.Err() != nil {
			break
		}
	}
	switch {
	case ctx.Err() != nil && restoreFailed:
		res.Status, res.Summary, res.Hints = Fail, "interrupted, and restoring the rule FAILED: re-apply it by hand", nil
	case ctx.Err() != nil:
		res.Status, res.Summary, res.Hints = Skip, "interrupted; every "+past+" endpoint was restored", nil
	default:
		return n, false
	}
	return n, true
}
