package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Flow-control scenarios (--workloads overload-classes,tenant-fairness):
// the fleet past its capacity, with and without admission windows and the
// gateway queue. Named here, they run instead of the routing workloads.
//
//   - overload-classes: 150 % of the fleet's capacity, 20 % of requests
//     high class and 80 % low, against round robin (no window) and against
//     the same engines behind a rule with admission_window = the engines'
//     max-num-seqs. It reports the high class's TTFT p99 and sheds, goodput
//     (200 with TTFT within --ttft-slo per second) against rr, whether every
//     shed came within its bound with a Retry-After, and the largest engine
//     queue (running + waiting) seen against the window.
//   - tenant-fairness: both tenants low class, one sending 10× the other,
//     150 % in total: the small tenant's success rate (200 with TTFT within
//     the SLO) on each arm.
//
// With --engines-at the capacity is measured and the window learned from
// the engines (flowfleet.go). Every request carries x-slo-ttft-ms = --ttft-slo: the deadline goodput
// counts, so the queue sheds what can no longer make it instead of serving
// it late. Tenants are told apart by x-gateway-inference-fairness-id (the
// rule has no API keys).
const (
	scenOverload = "overload-classes"
	scenTenants  = "tenant-fairness"
	armWindowed  = "windowed"
	// fcPrompt and fcOutput shape every request: unique prompts (no cache
	// effects between arms), short answers.
	fcPrompt, fcOutput = 400, 40
	fcShedSlack        = 500 * time.Millisecond // client-side allowance on a shed's bound
	fcMaxWait          = 10 * time.Second       // the gateway's --flow-max-wait default
)

// fcResult is one request of a flow-control scenario as the client saw it.
type fcResult struct {
	Class, Tenant string
	Start         float64 // seconds from the run's start
	Status        int
	Code          string  `json:",omitempty"` // X-Infergate-Error
	RetryAfter    string  `json:",omitempty"`
	TTFT          float64 // -1: no token
	E2E           float64
	Err           string `json:",omitempty"`
}

func (r *fcResult) good(slo time.Duration) bool {
	return r.Status == http.StatusOK && r.Err == "" && r.TTFT >= 0 && r.TTFT <= slo.Seconds()
}

// fcRequest is one arrival: when, and as whom.
type fcRequest struct {
	at            time.Duration
	class, tenant string
}

// fcSummary is one scenario run on one arm.
type fcSummary struct {
	Scenario, Arm   string
	Rate            float64
	N, Good         int
	Goodput         float64            // good requests per second of the window
	HighTTFTP99     float64            `json:",omitempty"`
	Shed            map[string]int     // by class
	ShedLate        int                // sheds answered after their bound (or without Retry-After)
	MaxEngineQueue  float64            // running + waiting, the largest sample on any engine
	Window          int                `json:",omitempty"`
	SuccessByTenant map[string]float64 `json:",omitempty"`
}

// flowScenarios runs the flow-control scenarios named in --workloads; ran
// is false when none is named (the routing workloads run as usual).
func (b *bench) flowScenarios(ctx context.Context, vip netip.Addr) (ran bool, err error) {
	var names []string
	for _, w := range b.cfg.workloadList() {
		if w == scenOverload || w == scenTenants {
			names = append(names, w)
		}
	}
	if len(names) == 0 {
		return false, nil
	}
	fleet, err := b.fcFleetOf(ctx) // flowfleet.go
	if err != nil {
		return true, err
	}
	if b.cfg.enginesAt == "" {
		err = b.serveArm(ctx, b.gw, armWindowed, vip, nil)
	} else {
		var stop func()
		stop, err = b.fcServeLearned(ctx, fleet.window)
		if stop != nil {
			defer stop()
		}
	}
	if err != nil {
		return true, err
	}
	rate := 1.5 * fleet.capacity
	run, warm := 20*time.Second, 4*time.Second
	if b.cfg.short {
		run = 12 * time.Second
	}
	fmt.Fprintf(b.report, "\nroutebench: flow control, %d engines, capacity %.1f req/s (%s), offered %.1f req/s (150 %%), window %d (max-num-seqs), measured %v after %v\n",
		len(b.engines), fleet.capacity, fleet.how, rate, fleet.window, run, warm)
	var out []*fcSummary
	for _, sc := range names {
		arrivals := fcArrivals(sc, rate, warm+run, b.cfg.seed)
		for _, arm := range []string{armRR, armWindowed} {
			if ctx.Err() != nil {
				return true, ctx.Err()
			}
			if err := b.fcDrain(ctx, 60*time.Second); err != nil {
				return true, err
			}
			if err := b.resetFleet(ctx); err != nil {
				return true, err
			}
			s, err := b.fcRun(ctx, sc, arm, arrivals, rate, warm, run, fleet.window)
			if err != nil {
				return true, err
			}
			out = append(out, s)
		}
		b.fcReport(sc, out[len(out)-2], out[len(out)-1])
	}
	return true, writeFile(filepath.Join(b.dir, "flow-summary.json"), out)
}

// fcArrivals is a Poisson arrival process at rate over d: overload-classes
// draws 20 % high and 80 % low; tenant-fairness splits 10:1 between two
// low-class tenants.
func fcArrivals(sc string, rate float64, d time.Duration, seed uint64) []fcRequest {
	rng := seeded(seed, 0xf10)
	var out []fcRequest
	for t := time.Duration(0); ; {
		t += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		if t >= d {
			return out
		}
		r := fcRequest{at: t, class: "low", tenant: "big"}
		switch sc {
		case scenOverload:
			if rng.Float64() < 0.2 {
				r.class = "high"
			}
			r.tenant = ""
		case scenTenants:
			if rng.Float64() < 1.0/11 {
				r.tenant = "small"
			}
		}
		out = append(out, r)
	}
}

// fcRun plays arrivals on one arm and summarises the measured window.
func (b *bench) fcRun(ctx context.Context, sc, arm string, arrivals []fcRequest, rate float64, warm, run time.Duration, window int) (*fcSummary, error) {
	rng := seeded(b.cfg.seed, 0xf11)
	prompts := make([]string, len(arrivals))
	for i := range prompts {
		prompts[i] = b.text.text(rng, fcPrompt)
	}
	sctx, stop := context.WithCancel(ctx)
	var maxQ float64
	var sampler sync.WaitGroup
	sampler.Go(func() { maxQ = fcSampleQueues(sctx, b.scrapeC, b.engines, 250*time.Millisecond) })
	rctx, cancel := context.WithTimeout(ctx, warm+run+fcMaxWait+5*time.Second)
	defer cancel()
	res := make([]*fcResult, len(arrivals))
	var wg sync.WaitGroup
	start := time.Now()
	for i, a := range arrivals {
		if d := time.Until(start.Add(a.at)); d > 0 {
			select {
			case <-time.After(d):
			case <-rctx.Done():
			}
		}
		if rctx.Err() != nil {
			break
		}
		wg.Go(func() { res[i] = b.fcSend(rctx, b.vips[arm], a, prompts[i], start) })
	}
	wg.Wait()
	stop()
	sampler.Wait()
	s := &fcSummary{Scenario: sc, Arm: arm, Rate: rate, Shed: map[string]int{}, MaxEngineQueue: maxQ, SuccessByTenant: map[string]float64{}}
	if arm == armWindowed {
		s.Window = window
	}
	var highTTFT []float64
	sent, okBy := map[string]int{}, map[string]int{}
	for _, r := range res {
		if r == nil || r.Start < warm.Seconds() || r.Start >= (warm+run).Seconds() {
			continue
		}
		s.N++
		good := r.good(b.cfg.ttftSLO)
		if good {
			s.Good++
		}
		if r.Class == "high" && r.Status == http.StatusOK && r.TTFT >= 0 {
			highTTFT = append(highTTFT, r.TTFT)
		}
		if r.Status == http.StatusServiceUnavailable {
			s.Shed[r.Class]++
			bound := min(b.cfg.ttftSLO, fcMaxWait) + fcShedSlack
			if r.RetryAfter == "" || r.E2E > bound.Seconds() {
				s.ShedLate++
			}
		}
		if r.Tenant != "" {
			sent[r.Tenant]++
			if good {
				okBy[r.Tenant]++
			}
		}
	}
	for t, n := range sent {
		s.SuccessByTenant[t] = float64(okBy[t]) / float64(n)
	}
	s.Goodput = float64(s.Good) / run.Seconds()
	s.HighTTFTP99 = percentiles(highTTFT).P99
	if err := writeFile(filepath.Join(b.dir, fmt.Sprintf("flow-requests-%s-%s.json", sc, arm)), res); err != nil {
		return nil, err
	}
	return s, nil
}

// fcSend posts one streamed completion with the request's class, tenant
// and deadline headers, and records what came back.
func (b *bench) fcSend(ctx context.Context, vip string, a fcRequest, prompt string, start time.Time) *fcResult {
	r := &fcResult{Class: a.class, Tenant: a.tenant, TTFT: -1}
	body, _ := json.Marshal(fcBody(b.cfg.model, prompt, true))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, vip+pathCompletions, bytes.NewReader(body))
	if err != nil {
		r.Err = err.Error()
		return r
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Priority", a.class)
	req.Header.Set("X-Slo-Ttft-Ms", strconv.FormatInt(b.cfg.ttftSLO.Milliseconds(), 10))
	if a.tenant != "" {
		req.Header.Set("X-Gateway-Inference-Fairness-Id", a.tenant)
	}
	t0 := time.Now()
	r.Start = t0.Sub(start).Seconds()
	defer func() { r.E2E = time.Since(t0).Seconds() }()
	resp, err := b.client.Do(req)
	if err != nil {
		r.Err = err.Error()
		return r
	}
	defer resp.Body.Close()
	r.Status, r.Code, r.RetryAfter = resp.StatusCode, resp.Header.Get("X-Infergate-Error"), resp.Header.Get("Retry-After")
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return r
	}
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			if err != io.EOF || r.TTFT < 0 {
				r.Err = "stream: " + err.Error()
			}
			return r
		}
		data, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r\n"), []byte(sseData))
		if !ok {
			continue
		}
		if string(data) == sseDone {
			return r
		}
		if r.TTFT < 0 && bytes.Contains(data, []byte(`"text":"`)) && !bytes.Contains(data, []byte(`"text":""`)) {
			r.TTFT = time.Since(t0).Seconds()
		}
	}
}

// fcSampleQueues samples every engine's running + waiting requests and
// returns the largest seen.
func fcSampleQueues(ctx context.Context, c *http.Client, engines []string, every time.Duration) float64 {
	t := time.NewTicker(every)
	defer t.Stop()
	peak := 0.0
	for {
		select {
		case <-ctx.Done():
			return peak
		case <-t.C:
		}
		got, err := fleetScrape(ctx, c, engines)
		if err != nil {
			continue
		}
		for _, g := range got {
			peak = max(peak, g.sum("vllm:num_requests_running")+g.sum("vllm:num_requests_waiting"))
		}
	}
}

// fcReport prints one scenario's two arms side by side.
func (b *bench) fcReport(sc string, rr, win *fcSummary) {
	w := b.report
	fmt.Fprintf(w, "  %s (%.1f req/s offered):\n", sc, win.Rate)
	for _, s := range []*fcSummary{rr, win} {
		classes := make([]string, 0, len(s.Shed))
		for c := range s.Shed {
			classes = append(classes, c)
		}
		sort.Strings(classes)
		var shed []string
		for _, c := range classes {
			shed = append(shed, fmt.Sprintf("%s %d", c, s.Shed[c]))
		}
		fmt.Fprintf(w, "    %-9s n=%-5d good=%-5d goodput %6.2f/s  high TTFT p99 %6.3fs  shed [%s] late-or-no-Retry-After %d  max engine queue %.0f",
			s.Arm, s.N, s.Good, s.Goodput, s.HighTTFTP99, strings.Join(shed, ", "), s.ShedLate, s.MaxEngineQueue)
		if s.Window > 0 {
			fmt.Fprintf(w, " (window %d)", s.Window)
		}
		if len(s.SuccessByTenant) > 0 {
			fmt.Fprintf(w, "  success small %.3f big %.3f", s.SuccessByTenant["small"], s.SuccessByTenant["big"])
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "    goodput windowed/rr: %s\n", ratio(win.Goodput, rr.Goodput))
}
