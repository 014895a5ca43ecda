package validate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/infergate/infergate/api/client"
	"github.com/infergate/infergate/rules"
)

// Metric families the workflow reads (docs/metrics.md). Families the
// gateway does not export make their checks SKIP or fall back.
const (
	famLegRequests      = "infergate_pd_leg_requests_total"
	famLadder           = "infergate_ladder_decisions_total"
	famPDRequests       = "loxilb_ai_pd_requests_total"
	famPrefillCount     = "loxilb_ai_pd_prefill_duration_seconds_count"
	famDecodeCount      = "loxilb_ai_pd_decode_ttfb_seconds_count"
	famTransferFailures = "loxilb_pd_kv_transfer_failure_total"
	famDPRequests       = "infergate_datapath_requests_total"
	famTrieMatchCount   = "loxilb_pd_trie_match_rate_count"
	famTrieMatchSum     = "loxilb_pd_trie_match_rate_sum"
	famTier15Hits       = "loxilb_pd_kv_tier15_hits_total"
	famTier15Misses     = "loxilb_pd_kv_tier15_misses_total"
	famKVBlocks         = "loxilb_pd_kv_blocks"
	famKVConnected      = "loxilb_kv_subscriber_connected"
	famKVWatchdog       = "loxilb_pd_kv_zero_hit_watchdog_total"
	famKVBlockMismatch  = "loxilb_kv_block_size_mismatches_total"

	tierPrefix   = "tier1_prefix"
	tierKVExact  = "tier1_5_kv_exact"
	outcomeHit   = "hit"
	phasePrefill = "prefill"
	phaseDecode  = "decode"
)

// workflow is one run's state.
type workflow struct {
	opts   Options
	hc     *http.Client // VIP probes and endpoints: never carries the API token
	apiHC  *http.Client // the management API (scrapes, status), with the token
	api    *client.Client
	report *Report

	rule     *rules.Rule
	compiled compiledView
	label    string
	vip      string // VIP:port probes go to
	// vipScheme and engineScheme are "https" for security 1/2 VIPs and
	// security 2 engines; validation checks serving, not identity,
	// so the client does not verify those certificates.
	vipScheme, engineScheme string
	model                   string
	before                  *Snapshot     // scraped before the first probe
	tier15                  *tier15Result // Tier 1.5 probe of the KV-exact step (nil: not run)
	// blockSizeWarned: the KV-exact step already reported a kvBlockSize
	// that differs from the engines' block size.
	blockSizeWarned bool
	// maxModelLen is the smallest max_model_len the endpoints' /v1/models
	// report for the probe model (0: unknown); probes are sized to fit it.
	maxModelLen int
	// streamPath is the path the SSE step found streaming ("" until then).
	streamPath string
}

func (w *workflow) scrape(ctx context.Context) (*Snapshot, error) {
	return Scrape(ctx, w.apiHC, strings.TrimRight(w.opts.Server, "/")+pathMetrics)
}

// awaitScrape scrapes until done holds or Settle passes, returning the last
// snapshot: counters move after the client has its last byte.
func (w *workflow) awaitScrape(ctx context.Context, done func(*Snapshot) bool) (*Snapshot, error) {
	deadline := time.Now().Add(w.opts.Settle)
	for {
		s, err := w.scrape(ctx)
		if err != nil || done(s) || time.Now().After(deadline) {
			return s, err
		}
		select {
		case <-ctx.Done():
			return s, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (w *workflow) ruleShape(ctx context.Context, res *StepResult) {
	r, err := findRule(ctx, w.api, w.opts.Target)
	var nf errNoRule
	var amb errAmbiguousName
	switch {
	case errors.As(err, &amb):
		res.Status, res.Summary = Fail, err.Error()
		return
	case errors.As(err, &nf):
		res.Status, res.Summary, res.Hints = Fail, err.Error(), []Hint{HintRuleCreation}
		return
	case err != nil:
		res.Status, res.Summary = Fail, fmt.Sprintf("management API %s: %v", w.opts.Server, err)
		return
	}
	sa := r.ServiceArguments
	raw, err := w.api.Compiled(ctx, sa.ExternalIP, sa.Port, sa.Protocol)
	if err != nil {
		res.Status, res.Summary, res.Hints = Fail, fmt.Sprintf("GET compiled: %v", err), []Hint{HintRuleCreation}
		return
	}
	if err := json.Unmarshal(raw, &w.compiled); err != nil {
		res.Status, res.Summary = Fail, fmt.Sprintf("decode compiled: %v", err)
		return
	}
	w.rule, w.label = &r, ruleLabel(r)
	w.report.Rule = w.label
	w.vip = net.JoinHostPort(sa.ExternalIP, strconv.Itoa(sa.Port))
	w.vipScheme, w.engineScheme = schemesOf(sa.Security)
	w.model = w.opts.Model
	if w.model == "" {
		w.model = sa.ModelName
	}

	var problems []string
	if sa.Mode != modeFullProxy {
		problems = append(problems, fmt.Sprintf("mode %d, want %d (fullproxy)", sa.Mode, modeFullProxy))
	}
	ev := []string{fmt.Sprintf("rule %q on %s, mode %d, sel %d, engine %q, sse %v", w.label, w.vip, sa.Mode, sa.Sel, w.compiled.Engine, w.compiled.SSE)}
	if w.compiled.isPD() {
		p, d := len(w.compiled.byRole(rolePrefill)), len(w.compiled.byRole(roleDecode))
		ev = append(ev, fmt.Sprintf("P/D %dP%dD, cache-aware %v", p, d, w.compiled.PD.CacheAware))
		if p == 0 || d == 0 {
			problems = append(problems, fmt.Sprintf("P/D needs a prefill and a decode endpoint with weight > 0 (have %dP %dD)", p, d))
		}
		if w.compiled.Engine == "" {
			problems = append(problems, "P/D rule without kvEngineType")
		}
		for i, e := range r.Endpoints {
			if e.NixlPort != 0 && w.compiled.Engine != "vllm" {
				problems = append(problems, fmt.Sprintf("endpoints[%d].nixl_port on engine %q (vLLM only)", i, w.compiled.Engine))
			}
		}
		if sa.PDBootstrapPort != 0 && w.compiled.Engine != "sglang" {
			problems = append(problems, fmt.Sprintf("pdBootstrapPort on engine %q (SGLang only)", w.compiled.Engine))
		}
	} else {
		for i, e := range r.Endpoints {
			if e.EPRole != 0 {
				problems = append(problems, fmt.Sprintf("endpoints[%d].ep_role %d without pd_disagg_mode", i, e.EPRole))
			}
		}
	}
	if w.compiled.kvExact() {
		kv := w.compiled.KV
		ev = append(ev, fmt.Sprintf("KV-exact mode %d, zmq port %d, block size %d, hash %s", kv.Mode, kv.ZMQPort, kv.BlockSize, kv.HashAlgo))
		if kv.BlockSize <= 0 || kv.ZMQPort == 0 {
			problems = append(problems, "kvExactMode without kvBlockSize/kvZmqPort")
		}
	}
	res.Evidence = ev
	if len(problems) > 0 {
		res.Status, res.Summary, res.Hints = Fail, strings.Join(problems, "; "), []Hint{HintRuleCreation}
		return
	}
	res.Status, res.Summary = Pass, fmt.Sprintf("%d endpoints, shape coherent", len(w.compiled.Endpoints))
}

func (w *workflow) readiness(ctx context.Context, res *StepResult) {
	probePath := ""
	if w.compiled.Probe.Type == "http" || w.compiled.Probe.Type == "https" {
		probePath = w.compiled.Probe.Request
	}
	failed, refused := 0, 0
	for _, e := range w.compiled.Endpoints {
		ev, models, ok, connRefused := w.endpointCheck(ctx, e.Address, probePath)
		if connRefused && e.Weight > 0 {
			refused++
		}
		if n := models.maxLen(w.opts.Model); n > 0 && (w.maxModelLen == 0 || n < w.maxModelLen) {
			w.maxModelLen = n
		}
		res.Evidence = append(res.Evidence, fmt.Sprintf("%s (%s, weight %d): %s", e.Address, e.Role, e.Weight, ev))
		if !ok && e.Weight > 0 {
			failed++
		}
		if w.model == "" && len(models) > 0 {
			w.model = models[0].id
		}
	}
	if w.model == "" {
		w.model = DefaultModel
	}
	if failed > 0 {
		res.Status, res.Summary = Fail, fmt.Sprintf("%d of %d endpoints not ready", failed, len(w.compiled.Endpoints))
		res.Hints = []Hint{HintClientHangs, HintRoleOverloaded}
		if refused > 0 {
			res.Summary += fmt.Sprintf(" (%d refused the connection)", refused)
			res.Hints = append([]Hint{HintEngineDown}, res.Hints...)
		}
		return
	}
	res.Status, res.Summary = Pass, fmt.Sprintf("%d endpoints ready; probes use model %q", len(w.compiled.Endpoints), w.model)
}

func (w *workflow) runtimeStatus(ctx context.Context, res *StepResult) {
	var st statusView
	found, err := getJSON(ctx, w.apiHC, strings.TrimRight(w.opts.Server, "/")+keyPath(*w.rule)+suffixStatus, &st)
	if err != nil || !found {
		res.Status, res.Summary = Skip, fmt.Sprintf("no runtime status (found %v, err %v)", found, err)
		return
	}
	res.Status, res.Summary = Pass, "ready"
	for _, e := range w.compiled.Endpoints {
		es := st.Endpoints[e.ID]
		res.Evidence = append(res.Evidence, fmt.Sprintf("%s (%s): state %s, breaker %s", e.ID, e.Role, es.State, es.Breaker))
		switch {
		case es.Breaker == "open":
			res.Status, res.Hints = Fail, appendHint(res.Hints, HintBreaker)
		case es.State == "down":
			res.Status, res.Hints = Fail, appendHint(res.Hints, HintClientHangs, HintRoleOverloaded)
		case es.State == "draining" && res.Status == Pass:
			res.Status = Warn
		}
	}
	if !st.Ready {
		res.Status, res.Summary = Fail, "not ready: "+st.Reason
		res.Hints = appendHint(res.Hints, HintClientHangs)
		return
	}
	if res.Status != Pass {
		res.Summary = "ready, but some endpoints are down, drained or tripped"
	}
}

func appendHint(hs []Hint, add ...Hint) []Hint {
	for _, a := range add {
		dup := false
		for _, h := range hs {
			dup = dup || h == a
		}
		if !dup {
			hs = append(hs, a)
		}
	}
	return hs
}

func (w *workflow) nonStream(ctx context.Context, res *StepResult) {
	var err error
	if w.before, err = w.scrape(ctx); err != nil {
		res.Evidence = append(res.Evidence, fmt.Sprintf("metrics before: %v", err))
	}
	r := w.send(ctx, "infergate validate: say hello", false)
	res.Evidence = append(res.Evidence, fmt.Sprintf("POST http://%s%s → %d in %s, X-Request-Id %q, %d bytes",
		w.vip, w.opts.Path, r.status, r.elapsed.Round(time.Millisecond), r.requestID, len(r.body)))
	switch {
	case r.err != nil:
		res.Status, res.Summary, res.Hints = Fail, r.err.Error(), hintsForProbe(r)
	case r.status != http.StatusOK:
		res.Status, res.Summary, res.Hints = Fail, fmt.Sprintf("status %d %s", r.status, r.errCode), hintsForProbe(r)
	case !hasChoices(r.body):
		res.Status, res.Summary, res.Hints = Fail, "200 without choices", []Hint{HintDecodeRecomputes}
	default:
		res.Status, res.Summary = Pass, fmt.Sprintf("200 with choices in %s", r.elapsed.Round(time.Millisecond))
	}
}

func (w *workflow) stream(ctx context.Context, res *StepResult) {
	r := w.send(ctx, "infergate validate: stream hello", true)
	res.Evidence = append(res.Evidence, fmt.Sprintf("POST http://%s%s stream → %d in %s, %d data events, [DONE] %v",
		w.vip, w.opts.Path, r.status, r.elapsed.Round(time.Millisecond), r.events, r.done))
	if streamed(r) {
		res.Status, res.Summary = Pass, fmt.Sprintf("%d events then [DONE]", r.events)
		return
	}
	// Some engines stream only on one of the two OpenAI paths: try the
	// other before blaming the request order.
	other := otherPath(w.opts.Path)
	if other != "" {
		o := w.sendPath(ctx, other, "infergate validate: stream hello", true)
		res.Evidence = append(res.Evidence, fmt.Sprintf("POST http://%s%s stream → %d in %s, %d data events, [DONE] %v",
			w.vip, other, o.status, o.elapsed.Round(time.Millisecond), o.events, o.done))
		if streamed(o) {
			w.streamPath = other
			res.Status = Warn
			res.Summary = fmt.Sprintf("the engines stream on %s but not on %s (%s): probe with --path %s, and send streaming clients there",
				other, w.opts.Path, streamFailure(r), other)
			res.Hints = []Hint{HintProbePath}
			return
		}
	}
	res.Status, res.Summary = Fail, streamFailure(r)
	switch {
	case r.err != nil, r.status != http.StatusOK:
		res.Hints = hintsForProbe(r)
	default:
		res.Hints = []Hint{HintClientHangs}
	}
	if other != "" {
		res.Hints = appendHint(res.Hints, HintProbePath)
	}
}

// streamed reports whether a stream probe got SSE events and [DONE].
func streamed(r probeResult) bool {
	return r.err == nil && r.status == http.StatusOK && r.events > 0 && r.done
}

// streamFailure says what went wrong with a stream probe, with the
// engine's own words when it refused.
func streamFailure(r probeResult) string {
	switch {
	case r.err != nil:
		return r.err.Error()
	case r.status != http.StatusOK:
		return fmt.Sprintf("status %d %s%s", r.status, r.errCode, bodyExcerpt(r.body))
	}
	return "stream ended without events or [DONE]"
}

// probesSent is how many VIP requests the two probe steps sent.
const probesSent = 2

func (w *workflow) roleTraffic(ctx context.Context, res *StepResult) {
	if w.before == nil {
		res.Status, res.Summary = Skip, "no metrics scrape before the probes"
		return
	}
	rule := Labels{labelRule: w.label}
	if !w.compiled.isPD() {
		after, err := w.awaitScrape(ctx, func(s *Snapshot) bool {
			return s.Sum(famDPRequests, rule)-w.before.Sum(famDPRequests, rule) >= probesSent
		})
		if err != nil {
			res.Status, res.Summary = Fail, err.Error()
			return
		}
		d := deltaBy(w.before, after, famDPRequests, labelEndpoint, rule)
		res.Evidence = append(res.Evidence, famDPRequests+" by endpoint: "+formatDeltas(d))
		total := 0.0
		for _, v := range d {
			total += v
		}
		if total < probesSent {
			res.Status, res.Summary, res.Hints = Fail, fmt.Sprintf("only %g of %d probes counted for the rule", total, probesSent), []Hint{HintClientHangs}
			return
		}
		res.Status, res.Summary = Pass, fmt.Sprintf("%g requests counted across %d endpoints", total, len(d))
		return
	}

	legs := func(s *Snapshot, phase string) float64 {
		if s.Has(famLegRequests) {
			// Only legs the engine answered 2xx count as handled; "none"
			// (no answer) and errors are what the other checks explain.
			n := 0.0
			for status, v := range s.By(famLegRequests, labelStatus, Labels{labelRule: w.label, labelPhase: phase}) {
				if strings.HasPrefix(status, "2") {
					n += v
				}
			}
			return n
		}
		if phase == phasePrefill {
			return s.Sum(famPrefillCount, rule)
		}
		return s.Sum(famDecodeCount, rule)
	}
	after, err := w.awaitScrape(ctx, func(s *Snapshot) bool {
		return legs(s, phasePrefill)-legs(w.before, phasePrefill) >= probesSent &&
			legs(s, phaseDecode)-legs(w.before, phaseDecode) >= probesSent
	})
	if err != nil {
		res.Status, res.Summary = Fail, err.Error()
		return
	}
	if !after.Has(famLegRequests) && !after.Has(famPrefillCount) && !after.Has(famPDRequests) {
		res.Status, res.Summary = Fail, "no P/D metric series for the rule: the gateway did not run a P/D sequence"
		res.Hints = []Hint{HintClientHangs}
		return
	}
	pre, dec := legs(after, phasePrefill)-legs(w.before, phasePrefill), legs(after, phaseDecode)-legs(w.before, phaseDecode)
	if after.Has(famLegRequests) {
		for _, phase := range []string{phasePrefill, phaseDecode} {
			d := deltaBy(w.before, after, famLegRequests, labelEndpoint, Labels{labelRule: w.label, labelPhase: phase})
			st := deltaBy(w.before, after, famLegRequests, labelStatus, Labels{labelRule: w.label, labelPhase: phase})
			res.Evidence = append(res.Evidence, fmt.Sprintf("%s{phase=%q} by endpoint: %s; by status: %s", famLegRequests, phase, formatDeltas(d), formatDeltas(st)))
		}
	} else {
		res.Evidence = append(res.Evidence,
			fmt.Sprintf("%s %+g, %s %+g (per-endpoint leg family %s not exported)", famPrefillCount, pre, famDecodeCount, dec, famLegRequests))
	}
	res.Evidence = append(res.Evidence, famPDRequests+" by status: "+formatDeltas(deltaBy(w.before, after, famPDRequests, labelStatus, rule)))
	tf := after.Sum(famTransferFailures, rule) - w.before.Sum(famTransferFailures, rule)
	if tf > 0 {
		res.Evidence = append(res.Evidence, fmt.Sprintf("%s %+g", famTransferFailures, tf))
	}
	switch {
	case pre < probesSent && dec < probesSent:
		res.Status, res.Summary = Fail, fmt.Sprintf("neither role handled the probes (prefill %+g, decode %+g)", pre, dec)
		res.Hints = []Hint{HintClientHangs}
	case pre < probesSent:
		res.Status, res.Summary = Fail, fmt.Sprintf("the prefill role handled %g of %d probes: decode recomputed the prompt", pre, probesSent)
		res.Hints = []Hint{HintDecodeRecomputes, HintClientHangs}
	case dec < probesSent:
		res.Status, res.Summary = Fail, fmt.Sprintf("the decode role handled %g of %d probes", dec, probesSent)
		res.Hints = []Hint{HintClientHangs, HintRoleOverloaded}
	case tf > 0:
		res.Status, res.Summary = Fail, fmt.Sprintf("%g decodes ran without KV transfer params", tf)
		res.Hints = []Hint{HintDecodeRecomputes}
	default:
		res.Status, res.Summary = Pass, fmt.Sprintf("prefill legs %+g, decode legs %+g for %d probes", pre, dec, probesSent)
	}
}
