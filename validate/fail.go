package validate

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/infergate/infergate/rules"
	"github.com/infergate/infergate/spec"
)

// Why a failure is a dead port in the endpoint's place: validate runs
// against an operator's fleet and cannot stop, crash or reconfigure their
// engines, and the gateway has no fault-injection switch (one would be a
// way to break production from the management API). What a crashed engine
// looks like to the gateway is a port that refuses connections, so the
// step re-applies the rule with the endpoint's port replaced by one that
// refuses them on the same host: the same role, pairing facts and address
// family, only nothing listening. The gateway then meets exactly what a
// dead engine gives it (refused connects, which its breaker counts and
// its retry moves to a peer), and the real engine never sees a request it
// would not have had. The original rule is always re-applied, as in the
// drain step.

// deadPortCandidates are the ports tried, in order, for one that refuses
// connections on an endpoint's host: well-known services nobody runs on
// an inference host (tcpmux, echo, discard, systat, daytime).
var deadPortCandidates = []int{1, 7, 9, 11, 13}

// deadPortDialTimeout bounds each candidate's connect; a refusal is
// immediate, a filtered port (no answer) is not a refusal and is skipped.
const deadPortDialTimeout = time.Second

// maxFailRequests bounds the requests sent while an endpoint is failed,
// waiting for its breaker to open: the P/D default opens after 3 refused
// connects and the single-pool one after 5, and a dead endpoint is picked
// at least every few requests by any selector that spreads load.
const maxFailRequests = 40

// refusedPort returns a port on host that refuses TCP connections (seen
// from this machine; the gateway is expected to share its view of the
// engine hosts), skipping the ports in used.
func refusedPort(ctx context.Context, host string, candidates []int, used map[int]bool) (int, error) {
	d := net.Dialer{Timeout: deadPortDialTimeout}
	for _, p := range candidates {
		if used[p] {
			continue
		}
		c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(p)))
		if err == nil {
			c.Close()
			continue
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			return p, nil
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
	}
	return 0, fmt.Errorf("no port of %v refuses connections on %s", candidates, host)
}

// failEach fails one endpoint at a time (its port replaced by a refusing
// one), checks that every request is still served by its peers and that
// the endpoint's breaker opens (or its health probe takes it out), then
// restores the rule and checks the real endpoint serves again with its
// breaker closed.
func (w *workflow) failEach(ctx context.Context, res *StepResult) {
	fam, sel, ok := w.disruptiveFamily(ctx, res, "fail")
	if !ok {
		return
	}
	orig := rules.SpecOnly(*w.rule)
	used := map[int]bool{}
	for _, e := range orig.Endpoints {
		used[e.TargetPort] = true
	}
	failed, interrupted := w.disruptEach(ctx, res, orig, "failed", loneFailable, func(i int, id string) ([]string, Status, bool, bool) {
		port, err := refusedPort(ctx, orig.Endpoints[i].EndpointIP, deadPortCandidates, used)
		if err != nil {
			return []string{fmt.Sprintf("%s: not failed: %v", id, err)}, Pass, true, false
		}
		ev, st, restoredOK := w.failOne(ctx, orig, i, port, fam, sel)
		return ev, st, restoredOK, true
	})
	if interrupted {
		return
	}
	switch {
	case failed == 0 && res.Status == Warn:
		res.Summary = "no endpoint could be failed: the only endpoint of a role on a connector whose decode never recomputes has no fallback"
	case failed == 0:
		res.Status, res.Summary = Skip, "no endpoint can be failed without emptying its role (or no refusing port was found)"
	case res.Status == Pass:
		res.Summary = fmt.Sprintf("%d endpoints failed and restored; peers served every request, the failed endpoint was taken out, and each is back in rotation", failed)
	case res.Status == Warn:
		res.Summary = fmt.Sprintf("%d endpoints failed and restored; peers served every request but the failed endpoint kept being tried", failed)
		res.Hints = []Hint{HintBreaker}
	default:
		res.Summary = "a failed endpoint was not taken out of rotation, or its peers did not serve"
		res.Hints = []Hint{HintBreaker, HintRoleOverloaded}
	}
}

// failOne fails endpoint i of orig by moving it to port, sends requests
// until it is out of rotation, checks its peers serve, restores (always)
// and checks the real endpoint is back.
func (w *workflow) failOne(ctx context.Context, orig rules.Rule, i, port int, fam string, sel Labels) (ev []string, st Status, restoredOK bool) {
	e := orig.Endpoints[i]
	id := net.JoinHostPort(e.EndpointIP, strconv.Itoa(e.TargetPort))
	dead := net.JoinHostPort(e.EndpointIP, strconv.Itoa(port))
	failedRule := rules.SpecOnly(orig)
	failedRule.Endpoints = append([]rules.Endpoint(nil), orig.Endpoints...)
	failedRule.Endpoints[i].TargetPort = port
	restore := w.restoreOnce(ctx, orig, id, "failing an endpoint", &ev, &st, &restoredOK)
	defer restore()
	if _, err := w.api.Apply(ctx, failedRule); err != nil {
		restore()
		return append(ev, fmt.Sprintf("%s: fail (port %d) not applied: %v", id, port, err)), Fail, restoredOK
	}
	ev = append(ev, fmt.Sprintf("%s failed: replaced by %s (refuses connections)", id, dead))
	out, sent, bad := w.failUntilOut(ctx, failedRule, dead)
	verdict, vst := failVerdict(out, sent, bad, w.compiled.CircuitBreaker)
	ev = append(ev, dead+": "+verdict)
	st = vst
	if st == Fail || ctx.Err() != nil {
		restore()
		return ev, st, restoredOK
	}
	// With the endpoint out, its peers alone serve.
	during, badDuring := w.probeDeltaChecked(ctx, fam, sel)
	ev = append(ev, fmt.Sprintf("%s out of rotation: %s", dead, formatDeltas(during)))
	restore()
	if st == Fail || ctx.Err() != nil {
		return ev, st, restoredOK
	}
	switch {
	case badDuring > 0:
		return append(ev, fmt.Sprintf("%s: FAIL, %d of %d requests failed while it was out", dead, badDuring, w.opts.Probes)), Fail, true
	case during[dead] > 0 && out.Breaker == "open":
		return append(ev, dead+": FAIL, requests still reached it with its breaker open"), Fail, true
	}
	after := w.probeDelta(ctx, fam, sel)
	ev = append(ev, fmt.Sprintf("%s restored: %s", id, formatDeltas(after)))
	more, rst := w.backInRotation(ctx, orig, id, after)
	ev = append(ev, more...)
	if es, found := w.endpointStatus(ctx, orig, id); found && es.Breaker == "open" {
		ev, rst = append(ev, id+": FAIL, its breaker is open after the restore"), Fail
	}
	if rank(rst) > rank(st) {
		st = rst
	}
	return ev, st, true
}

// failUntilOut sends requests while endpoint dead is failed, until the
// runtime takes it out of rotation (breaker open, or not active because a
// health probe failed) or maxFailRequests were sent. It returns the dead
// endpoint's last status, the requests sent and how many were not
// answered 2xx.
func (w *workflow) failUntilOut(ctx context.Context, r rules.Rule, dead string) (last endpointState, sent, bad int) {
	for sent < maxFailRequests && ctx.Err() == nil {
		if es, found := w.endpointStatus(ctx, r, dead); found {
			last = es
			if outOfRotation(es) {
				return last, sent, bad
			}
		}
		if p := w.send(ctx, spreadPrompt(sent), false); p.err != nil || p.status/100 != 2 {
			bad++
		}
		sent++
	}
	if es, found := w.endpointStatus(ctx, r, dead); found {
		last = es
	}
	return last, sent, bad
}

// outOfRotation reports whether the runtime no longer selects an
// endpoint: its breaker is open (or in its half-open trial) or its health
// probe has not found it up (a rule without probes reports "unprobed").
func outOfRotation(es endpointState) bool {
	return breakerOut(es) || healthOut(es)
}

func breakerOut(es endpointState) bool { return es.Breaker == "open" || es.Breaker == "half-open" }
func healthOut(es endpointState) bool  { return es.State == "down" || es.State == "probing" }

// failVerdict judges a failed endpoint after failUntilOut: every request
// must have been served by a peer (the fallback), and the endpoint must be
// out of rotation — by its breaker, or its health probe. A rule without
// breakers (cb_enable off) keeps trying the dead endpoint before each
// retry: a warning, not a failure, since every client was still served.
func failVerdict(es endpointState, sent, bad int, breaker bool) (string, Status) {
	switch {
	case bad > 0:
		return fmt.Sprintf("FAIL, %d of %d requests failed while it refused connections (the retry on a peer did not serve them)", bad, sent), Fail
	case breakerOut(es):
		return fmt.Sprintf("breaker %s after %d requests, every one served by a peer", es.Breaker, sent), Pass
	case healthOut(es):
		return fmt.Sprintf("kept out of rotation by its health probe (state %s) after %d requests, every one served by a peer", es.State, sent), Pass
	case !breaker:
		return fmt.Sprintf("WARN, no breaker on this rule (cb_enable): %d requests served by peers, but the dead endpoint stays in rotation and costs each request that picks it a refused connect", sent), Warn
	case es.State == "":
		return fmt.Sprintf("WARN, %d requests served by peers; no runtime status to confirm the breaker opened", sent), Warn
	}
	return fmt.Sprintf("FAIL, breaker still %s after %d requests (every one served by a peer)", es.Breaker, sent), Fail
}

// loneFailable is the fail step's rule for the only usable endpoint of
// its role on a P/D rule. Every request must still be served while it
// refuses connections, and once its breaker opens no pair remains, so:
//   - a role-0 endpoint must serve what no pair can (the no-pair
//     fallback); without one the endpoint is left alone, as drain leaves it;
//   - until the breaker opens the dialect must serve without it: a request
//     whose decodes are all unreachable goes to the role-0 endpoint
//     (datapath/pdfallback.go), and a vLLM decode recomputes the prompt
//     when its prefill fails (NIXL, Mooncake); SGLang and TensorRT-LLM
//     need their prefill, so a lone one is left alone;
//   - a rule with a MoRIIOConnector endpoint is left alone with a WARN:
//     that decode never recomputes, so failing a lone endpoint fails
//     requests by design, not by fault.
func loneFailable(r rules.Rule, i int) (why string, st Status) {
	if !r.ServiceArguments.PDDisaggMode {
		return " (no peer serves in its place)", Pass
	}
	if r.Endpoints[i].EPRole == 0 {
		return " (the role-0 fallback gets requests only when no pair serves, so it would never be seen failing)", Pass
	}
	for _, e := range r.Endpoints {
		if strings.EqualFold(e.KVConnector, connectorMoRIIO) {
			return " (WARN: MoRI-IO's decode never recomputes, so without it requests fail by design; not tested)", Warn
		}
	}
	if countRole(r, 0) == 0 {
		return " (no role-0 endpoint to serve once its breaker opens)", Pass
	}
	engine := r.ServiceArguments.KVEngineType
	if r.Endpoints[i].EPRole == 1 && engine != "" && engine != string(spec.EngineVLLM) {
		return fmt.Sprintf(" (%s needs its prefill: no decode recomputes)", engine), Pass
	}
	return "", Pass
}

// connectorMoRIIO is vLLM's kv_connector name for MoRI-IO.
const connectorMoRIIO = "MoRIIOConnector"
