package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The engine-aware scenarios (--busy-engine): what the cost model is for,
// measured against the KV-exact ladder as it was before it (the in-flight
// load guard, served by a second gateway started with
// --kv-legacy-load-guard, so both arms run in the same run on the same
// fleet).
//
//   - cost-vs-legacy: shared prefix at 70 % of capacity, arms rr, kv and
//     kv-legacy: the estimate must not lose cache affinity to save a little
//     load (its TTFT p50 against the legacy arm's).
//   - busy-engine: the same workload while a second client, bypassing the
//     gateway, keeps one engine's queue at about busyWaiting requests
//     (busyWaiting + its batch in flight, long answers): the share of the
//     gateway's requests sent to that engine, and TTFT p99 against rr.
const (
	armKVLegacy  = "kv-legacy"
	busyWaiting  = 35
	busyPrompt   = 200 // tokens of each direct request's (unique) prompt
	busyOutput   = 400 // its answer: long, so the queue turns over slowly
	busyEngineIx = 0   // the engine kept busy
)

// The scenarios' names (--busy-scenarios).
const (
	scenarioCost = "cost-vs-legacy"
	scenarioBusy = "busy-engine"
)

// busyConfig is the scenario's part of the configuration.
type busyConfig struct {
	enabled bool
	window  time.Duration
	// legacyGateway is the legacy arm's binary: "" runs the bench's own
	// gateway with --kv-legacy-load-guard; a path runs another build (the
	// ladder of an older commit), with that flag only if the build lists
	// it, so "the ladder as it was" can be measured, not only the guard.
	legacyGateway string
	arms          string // the cost-vs-legacy scenario's arms; the busy-engine one runs them but ideal
	scenarios     string
	// capacity (req/s) is what the scenarios' loads are fractions of: 0
	// ramps (or takes the main phase's ramp); a fixed one keeps runs on a
	// shared box comparable, where a ramp step stalled by another process
	// falls back to a lower rate.
	capacity float64
	// rounds repeats the cost-vs-legacy scenario's arms, in reverse order
	// every other round: on a shared box the minute a run lands in moves a
	// p50 by more than the arms differ.
	rounds int
}

func defaultBusyConfig() busyConfig {
	return busyConfig{arms: strings.Join([]string{armRR, armKV, armKVLegacy}, ","), scenarios: scenarioCost + "," + scenarioBusy, rounds: 1}
}

func (c *busyConfig) flags(fs *flag.FlagSet) {
	fs.BoolVar(&c.enabled, "busy-engine", c.enabled, "also run the engine-aware scenarios: shared prefix with the KV arm against the legacy in-flight guard (a second gateway), and with one engine kept busy by a client that bypasses the gateway")
	fs.DurationVar(&c.window, "busy-window", c.window, "measured window of the engine-aware scenarios (0: the run's window)")
	fs.StringVar(&c.legacyGateway, "legacy-gateway", c.legacyGateway, "gateway binary of the kv-legacy arm, e.g. an older build's ladder; started with --kv-legacy-load-guard only if its `serve --help` lists that flag (empty: --gateway with the flag)")
	fs.StringVar(&c.arms, "busy-arms", c.arms, "comma-separated arms of the engine-aware scenarios: rr, kv, kv-legacy, and ideal (the pinned arm, in the cost-vs-legacy scenario only: the floor of the TTFT a router can reach)")
	fs.Float64Var(&c.capacity, "busy-capacity", c.capacity, "capacity in req/s the engine-aware scenarios' loads are fractions of (0: the shared-prefix ramp's)")
	fs.IntVar(&c.rounds, "busy-rounds", c.rounds, "rounds of the cost-vs-legacy scenario, each arm once a round, the order reversed every other round (2: A B C C B A); each round has its own rows and requests files")
	fs.StringVar(&c.scenarios, "busy-scenarios", c.scenarios, "comma-separated engine-aware scenarios to run: "+scenarioCost+", "+scenarioBusy)
}

// armList is the scenario's arms in the order given, ideal kept only where
// withIdeal (a pinned arm bypasses the gateway: it has no share of the busy
// engine to report).
func (c busyConfig) armList(withIdeal bool) ([]string, error) {
	var arms []string
	for _, a := range strings.Split(c.arms, ",") {
		switch a = strings.TrimSpace(a); a {
		case "":
		case armRR, armKV, armKVLegacy:
			arms = append(arms, a)
		case armIdeal:
			if withIdeal {
				arms = append(arms, a)
			}
		default:
			return nil, fmt.Errorf("--busy-arms: unknown arm %q (rr, kv, kv-legacy, ideal)", a)
		}
	}
	return arms, nil
}

// roundOrder is the arms of the cost-vs-legacy scenario's round (from 0):
// as given in even rounds, reversed in odd ones, so that over two rounds
// every arm runs as often early as late (A B C C B A) and a box whose load
// drifts favours none of them.
func roundOrder(arms []string, round int) []string {
	if round%2 == 0 {
		return arms
	}
	r := slices.Clone(arms)
	slices.Reverse(r)
	return r
}

// runs reports whether scenario is among --busy-scenarios.
func (c busyConfig) runs(scenario string) (bool, error) {
	found := false
	for _, s := range strings.Split(c.scenarios, ",") {
		switch s = strings.TrimSpace(s); s {
		case "":
		case scenarioCost, scenarioBusy:
			found = found || s == scenario
		default:
			return false, fmt.Errorf("--busy-scenarios: unknown scenario %q (%s, %s)", s, scenarioCost, scenarioBusy)
		}
	}
	return found, nil
}

// check refuses unknown arms and scenarios before anything starts.
func (c busyConfig) check() error {
	if c.capacity < 0 {
		return fmt.Errorf("--busy-capacity %v: negative", c.capacity)
	}
	if c.rounds < 1 {
		return fmt.Errorf("--busy-rounds %d: at least 1", c.rounds)
	}
	if _, err := c.armList(true); err != nil {
		return err
	}
	_, err := c.runs(scenarioCost)
	return err
}

// legacyFlag is the serve flag that turns the bench's own gateway's ladder
// back into the in-flight guard.
const legacyFlag = "--kv-legacy-load-guard"

// legacyLaunch is the legacy arm's binary and extra serve flags: own with
// the legacy guard, or --legacy-gateway with the flag only when help (its
// `serve --help`) lists it. An older build without the flag runs its ladder
// as it was built, which is the point of naming one.
func (c busyConfig) legacyLaunch(own string, help func(bin string) (string, error)) (bin string, args []string, err error) {
	if c.legacyGateway == "" {
		return own, []string{legacyFlag}, nil
	}
	h, err := help(c.legacyGateway)
	if err != nil {
		return "", nil, fmt.Errorf("--legacy-gateway %s: %w", c.legacyGateway, err)
	}
	if slices.Contains(strings.Fields(h), legacyFlag) {
		args = []string{legacyFlag}
	}
	return c.legacyGateway, args, nil
}

// serveHelp is bin's `serve --help`.
func serveHelp(bin string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "serve", "--help").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("serve --help: %w (%s)", err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// busyPhase runs the scenarios when enabled, after the main phase (whose
// shared-prefix ramp gives the capacity when it ran).
func (b *bench) busyPhase(ctx context.Context, t timing, logf io.Writer) error {
	if !b.cfg.busy.enabled || ctx.Err() != nil {
		return nil
	}
	if b.cfg.busy.window > 0 {
		t.run = b.cfg.busy.window
	}
	saved := b.cfg.workloads
	b.cfg.workloads = "shared-prefix"
	ws, err := b.workloads()
	b.cfg.workloads = saved
	if err != nil {
		return err
	}
	w := ws[0]
	capacity := b.cfg.busy.capacity
	for _, s := range b.runs {
		if capacity == 0 && s.Workload == w.name && s.Load > 0 {
			capacity = s.Rate / s.Load
		}
	}
	if capacity == 0 {
		if capacity, err = b.ramp(ctx, w, t); err != nil {
			return err
		}
	}

	cost, err := b.cfg.busy.runs(scenarioCost)
	if err != nil {
		return err
	}
	busyToo, err := b.cfg.busy.runs(scenarioBusy)
	if err != nil {
		return err
	}
	costArms, err := b.cfg.busy.armList(true)
	if err != nil {
		return err
	}
	arms, _ := b.cfg.busy.armList(false)
	gws := map[string]*gateway{}
	if slices.Contains(costArms, armKVLegacy) {
		legacy, stopLegacy, err := b.startLegacy(ctx, logf)
		if err != nil {
			return err
		}
		defer stopLegacy()
		gws[armKVLegacy] = legacy
	}
	var rows []*runSummary
	rounds := 0
	if cost {
		rounds = b.cfg.busy.rounds
	}
	if slices.Contains(costArms, armKV) {
		// Without a ramp first (--busy-capacity) the kv arm would open
		// inside the inventory's warm-up after the subscriptions connected.
		if err := waitTrusted(ctx, b.scrapeC, b.gw, len(b.engines), time.Minute); err != nil {
			return err
		}
	}
	for round := range rounds {
		wr := w
		if round > 0 { // its own requests files and rows; the same arrivals
			wr.name = fmt.Sprintf("%s-r%d", w.name, round+1)
		}
		rows = rows[:0]
		for _, arm := range roundOrder(costArms, round) {
			s, err := b.measureOn(ctx, gws, wr, arm, 0.7, 0.7*capacity, t)
			if err != nil {
				return err
			}
			rows = append(rows, s)
		}
		b.table(wr.name+" (cost vs legacy guard)", capacity, rows)
		b.compareLegacy(rows)
	}
	if !busyToo {
		return nil
	}

	busyURL := b.engines[busyEngineIx]
	busy := strings.TrimPrefix(busyURL, "http://")
	stop := b.keepBusy(ctx, busyURL)
	defer stop()
	if err := b.waitQueue(ctx, busyURL, busyWaiting*2/3, 30*time.Second); err != nil {
		return err
	}
	// The busy engine cannot reset its cache while it runs requests: the
	// runs below reset, scrape and count the others only (its hits are
	// the direct client's anyway); the rule still routes to all of them.
	fleet := b.engines
	b.engines = append(append([]string(nil), fleet[:busyEngineIx]...), fleet[busyEngineIx+1:]...)
	defer func() { b.engines = fleet }()
	rows = rows[:0]
	var shares []string
	name := "busy-engine"
	for _, arm := range arms {
		g := b.gatewayOf(gws, arm)
		before, _ := scrape(ctx, b.scrapeC, g.api+"/metrics", isRequestsMetric)
		wb := w
		wb.name = name
		s, err := b.measureOn(ctx, gws, wb, arm, 0.7, 0.7*capacity, t)
		if err != nil {
			return err
		}
		after, _ := scrape(ctx, b.scrapeC, g.api+"/metrics", isRequestsMetric)
		to, all := endpointShare(delta(before, after), busy)
		shares = append(shares, fmt.Sprintf("  %-9s %4.0f of %4.0f gateway requests to the busy engine %s (%.1f %%)", arm, to, all, busy, pct(to, all)))
		rows = append(rows, s)
	}
	stop()
	b.table(name+fmt.Sprintf(" (%s kept at ~%d waiting by a client bypassing the gateway)", busy, busyWaiting), capacity, rows)
	fmt.Fprintln(b.report, "  share of each arm's requests (warm-up included) the gateway sent to the busy engine (target ≤ 1 %):")
	for _, l := range shares {
		fmt.Fprintln(b.report, l)
	}
	return nil
}

// startLegacy starts the legacy arm: the same KV rule on a gateway with the
// old guard. stop ends it and removes its state.
func (b *bench) startLegacy(ctx context.Context, logf io.Writer) (legacy *gateway, stop func(), err error) {
	bin, args, err := b.cfg.busy.legacyLaunch(b.cfg.gatewayBin, serveHelp)
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(b.report, "  kv-legacy arm: gateway %s, serve flags %q\n", bin, args)
	if b.relay != nil { // engines that dial reach it through the relay (kvrelay.go)
		args = append(args, "--kv-bind-addr", b.relay.addr(1))
	}
	if legacy, stop, err = b.startSideGateway("legacy", bin, logf, args); err != nil {
		return nil, nil, err
	}
	vip := b.vipAt(vipOffsetLegacy)
	if err = b.serveArm(ctx, legacy, armKVLegacy, vip, nil); err == nil {
		err = b.on(legacy, func() error { return b.waitSubscribed(ctx, 20*time.Second) })
	}
	if err == nil {
		err = waitTrusted(ctx, b.scrapeC, legacy, len(b.engines), time.Minute)
	}
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("legacy gateway: %w", err)
	}
	return legacy, stop, nil
}

// kvInventoryPath is the management API's KV-exact inventory (one row per
// rule, endpoint and rank, with its trust); builds since before routebench
// serve it too.
const kvInventoryPath = "/netlox/v1/config/ai/kv/inventory"

// waitTrusted waits until g's KV-exact inventory trusts at least want rows:
// an inventory distrusts an endpoint for its warm-up (10 s by default)
// after its subscription connects, and the KV tier falls through to least
// connections meanwhile, scattering the groups the window then measures
// (18 of 339 requests lost affinity in a kv run started 3 s after the
// subscriptions).
func waitTrusted(ctx context.Context, c *http.Client, g *gateway, want int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	trusted := 0
	for {
		var inv struct {
			Rows []struct {
				Trusted bool `json:"trusted"`
			} `json:"rows"`
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.api+kvInventoryPath, nil)
		resp, err := c.Do(req)
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&inv)
			resp.Body.Close()
		}
		trusted = 0
		for _, r := range inv.Rows {
			if r.Trusted {
				trusted++
			}
		}
		if err == nil && trusted >= want {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("KV-exact inventory of %s: %d of %d endpoints trusted after %v (%v)", g.api, trusted, want, timeout, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// measureOn is measure with the arm's own gateway (the legacy arm's) as
// the one whose counters and CPU are read.
func (b *bench) measureOn(ctx context.Context, gws map[string]*gateway, w workload, arm string, frac, rate float64, t timing) (s *runSummary, err error) {
	err = b.on(b.gatewayOf(gws, arm), func() error {
		s, err = b.measure(ctx, w, arm, frac, rate, t)
		return err
	})
	return s, err
}

// gatewayOf is the gateway serving arm: its own in gws, else the main one.
func (b *bench) gatewayOf(gws map[string]*gateway, arm string) *gateway {
	if g := gws[arm]; g != nil {
		return g
	}
	return b.gw
}

// on runs f with g as the gateway whose counters and CPU are read (b.gw),
// then puts the main one back.
func (b *bench) on(g *gateway, f func() error) error {
	main := b.gw
	b.gw = g
	defer func() { b.gw = main }()
	return f()
}

// compareLegacy prints the cost arm's TTFT against the legacy guard's.
func (b *bench) compareLegacy(rows []*runSummary) {
	var kv, legacy, ideal *runSummary
	for _, r := range rows {
		switch r.Arm {
		case armKV:
			kv = r
		case armKVLegacy:
			legacy = r
		case armIdeal:
			ideal = r
		}
	}
	if kv == nil || legacy == nil {
		return
	}
	fmt.Fprintf(b.report, "  kv (estimate) against kv-legacy (in-flight guard), same run: TTFT p50 %.3f / %.3f s = %s (target ≤ 0.90), p99 %.3f / %.3f s = %s; lost affinity %d / %d against %d / %d\n",
		kv.TTFT.P50, legacy.TTFT.P50, ratio(kv.TTFT.P50, legacy.TTFT.P50), kv.TTFT.P99, legacy.TTFT.P99, ratio(kv.TTFT.P99, legacy.TTFT.P99),
		kv.Lost, kv.N, legacy.Lost, legacy.N)
	fmt.Fprintf(b.report, "    mean TTFT %.3f / %.3f s = %s; p50 of the requests that kept affinity %.3f / %.3f s = %s\n",
		kv.TTFTMean, legacy.TTFTMean, ratio(kv.TTFTMean, legacy.TTFTMean), kv.KeptTTFT.P50, legacy.KeptTTFT.P50, ratio(kv.KeptTTFT.P50, legacy.KeptTTFT.P50))
	if ideal != nil {
		fmt.Fprintf(b.report, "  the pinned floor (ideal), same run: TTFT p50 %.3f s; kv %s of it, kv-legacy %s\n",
			ideal.TTFT.P50, ratio(kv.TTFT.P50, ideal.TTFT.P50), ratio(legacy.TTFT.P50, ideal.TTFT.P50))
	}
}

// keepBusy starts the direct client: busyWaiting + the engine's batch
// requests always in flight to engine (long answers, unique prompts, no
// gateway), until the returned stop is called.
func (b *bench) keepBusy(ctx context.Context, engine string) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var seq atomic.Uint64
	workers := busyWaiting + 16
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				n := seq.Add(1)
				rng := seeded(b.cfg.seed+7, n)
				body, _ := json.Marshal(map[string]any{"model": b.cfg.model, "prompt": fmt.Sprintf("direct %d:", n) + b.text.text(rng, busyPrompt),
					"max_tokens": busyOutput})
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, engine+"/v1/completions", bytes.NewReader(body))
				if err != nil {
					return
				}
				req.Header.Set("Content-Type", "application/json")
				resp, err := b.client.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						time.Sleep(100 * time.Millisecond)
					}
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			wg.Wait()
		})
	}
}

// waitQueue waits until engine reports at least want waiting requests.
func (b *bench) waitQueue(ctx context.Context, engine string, want int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		s, err := scrape(ctx, b.scrapeC, engine+"/metrics", func(n string) bool { return n == "vllm:num_requests_waiting" })
		if err == nil && s.sum("vllm:num_requests_waiting") >= float64(want) {
			return nil
		}
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("busy engine %s: queue did not reach %d waiting", engine, want)
}

func isRequestsMetric(name string) bool { return name == "infergate_datapath_requests_total" }

// endpointShare sums infergate_datapath_requests_total in d: the series
// for endpoint id, and all of them.
func endpointShare(d series, id string) (to, all float64) {
	for k, v := range d {
		all += v
		if strings.Contains(k, `endpoint="`+id+`"`) {
			to += v
		}
	}
	return to, all
}

func pct(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * a / b
}
