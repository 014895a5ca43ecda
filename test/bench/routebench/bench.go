package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/infergate/infergate/kvexact/bpe"
	"github.com/infergate/infergate/test/enginesim"
)

// Arms.
const (
	armRR       = "rr"
	armLeast    = "least"
	armPrefix   = "prefix"
	armKV       = "kv"
	armIdeal    = "ideal"
	armPDLeast  = "pd-least"
	armPDPrefix = "pd-prefix"
	armPDKV     = "pd-kv"
)

// plan says which arms run at which load for one workload.
type plan struct {
	loads []loadArms
}

type loadArms struct {
	frac float64
	arms []string
}

// timing is one mode's durations.
type timing struct {
	// warm precedes every measured window (the same arrivals, not
	// counted), at least a workload's settle time; warmMax bounds the
	// longer warm-up a workload with groups takes to send each once.
	warm, warmMax, run, drain, rampWarm, rampStep, rampDrain time.Duration
	// rampSteps are the ramp's rates as multiples of the modelled guess,
	// tried upwards while they pass; rampBelow (0: none) is tried once
	// when the first fails, so that a first step set high to save time
	// still ends on a measured rate (rampNext).
	rampSteps []float64
	rampBelow float64
}

// rampNext is the ramp's next step given the verdicts of the steps run so
// far (in order): up through steps while they pass; when the first fails,
// below once (when set and lower); more is false when the ramp is over.
func rampNext(steps []float64, below float64, passed []bool) (next float64, more bool) {
	n := len(passed)
	switch {
	case n == 0:
		return steps[0], true
	case !passed[0]: // down once, then over whatever it found
		return below, n == 1 && below > 0 && below < steps[0]
	case passed[n-1] && n < len(steps):
		return steps[n], true
	}
	return 0, false
}

func (c *config) timing() timing {
	t := c.modeTiming()
	if c.window > 0 {
		t.run = c.window
	}
	return t
}

// modeTiming is where the wall time goes: per measured run its warm-up
// (4 s, the shared prefix's first sights ≈ 4.4 s, a multi-turn's 6.3 s
// settle), its window, and the drain of the window's requests (1–6 s); per
// ramp step ≈ 8 s passing, ≈ 5 s failing (13–15 s on multi-turn). The
// windows are as short as keeps every percentile's meaning: percentiles
// are nearest-rank, so below 100 measured requests a p99 is the slowest
// request and from 101 to 200 the second slowest, in an 8 s window as in
// a 7 s one (shared prefix at 70 %: 88 → 79 requests; 150 %: 157 → 140)
// and in a 6 s as in a 5 s one.
func (c *config) modeTiming() timing {
	if c.short {
		// One ramp step: the modelled guess passed at 1.4× in every
		// recorded short run and 2.0× failed in every one, so the second
		// step only ever spent ≈ 5 s confirming the first; when 1.4× fails,
		// the fallback (0.7 of it, 0.98× the guess) is about what a 1.0×
		// step would have found.
		return timing{warm: 4 * time.Second, warmMax: 12 * time.Second, run: 5 * time.Second, drain: 4 * time.Second, rampWarm: 2 * time.Second,
			rampStep: 3 * time.Second, rampDrain: 5 * time.Second, rampSteps: []float64{1.4}}
	}
	// The ramp starts at 1.25× the modelled guess: 0.9× passed on every
	// workload (shared prefix, multi-turn, trace, P/D) in the recorded full
	// runs. When 1.25× fails (multi-turn did; on a loaded box others do)
	// the 0.9× step is run then, so the capacity is what the old ramp
	// would have measured, and its time is spent only when needed.
	return timing{warm: 4 * time.Second, warmMax: 12 * time.Second, run: 7 * time.Second, drain: 6 * time.Second, rampWarm: 2 * time.Second,
		rampStep: 3 * time.Second, rampDrain: 5 * time.Second, rampSteps: []float64{1.25, 1.7, 2.3}, rampBelow: 0.9}
}

func (c *config) planFor(w string) plan {
	p := c.modePlan(w)
	if c.arms == "" {
		return p
	}
	keep := map[string]bool{}
	for _, a := range strings.Split(c.arms, ",") {
		keep[strings.TrimSpace(a)] = true
	}
	var out plan
	for _, la := range p.loads {
		var arms []string
		for _, a := range la.arms {
			if keep[a] {
				arms = append(arms, a)
			}
		}
		if len(arms) > 0 {
			out.loads = append(out.loads, loadArms{la.frac, arms})
		}
	}
	return out
}

func (c *config) modePlan(w string) plan {
	if strings.HasPrefix(w, "pd-") {
		if w == "pd-shared-prefix" {
			return plan{[]loadArms{{0.7, []string{armPDLeast, armPDPrefix, armPDKV}}}}
		}
		return plan{} // the P/D variant runs shared prefix only (time)
	}
	// kv runs right after rr at every load: the gateway's CPU per request
	// of the two is compared, and on a shared box adjacent runs see the
	// most similar contention (cpuratio.go).
	all := []string{armRR, armKV, armLeast, armPrefix, armIdeal}
	over := []string{armRR, armKV, armPrefix}
	if w != "shared-prefix" {
		// Time: least connections and the overloaded prefix arm are
		// measured on the shared-prefix workload only.
		all, over = []string{armRR, armKV, armPrefix, armIdeal}, []string{armRR, armKV}
	}
	if w == "trace" {
		// Pinning a Zipf trace's hot documents to one engine each
		// overloads those engines (ideal answered 19 of 125 at 70 %, TTFT
		// p50 8.6 s): its TTFT bounds nothing. The ideal hit rate every
		// row reports is computed from the requests, not run.
		all = []string{armRR, armKV, armPrefix}
	}
	for _, ext := range c.externalArms {
		name, _, _ := strings.Cut(ext, "=")
		all, over = append(all, name), append(over, name)
	}
	if c.short {
		switch w {
		case "shared-prefix":
			// No ideal arm (12 s): every row still reports the ideal hit
			// rate, computed for its own requests; the full run measures
			// the pinned arm's TTFT.
			return plan{[]loadArms{{0.7, []string{armRR, armKV, armPrefix}}, {1.5, []string{armRR, armKV}}}}
		default:
			// Against a capacity scaled from the shared-prefix ramp, which
			// overestimates it (rr hits more there): half of it is about
			// 70 % of what a multi-turn ramp measures.
			return plan{[]loadArms{{0.5, []string{armRR, armKV}}}}
		}
	}
	switch w {
	case "multi-turn-noid":
		// The header only matters where a tier reads it (CHWBL's fallback
		// key, P/D sessions): run the arms that could differ.
		return plan{[]loadArms{{0.7, []string{armRR, armKV, armPrefix}}}}
	}
	return plan{[]loadArms{{0.7, all}, {1.5, over}}}
}

// workload builds flows at a rate.
type workload struct {
	name string
	// flows is the arrivals at rate over d; firstRate paces the first
	// sights of a workload with groups (sharedPrefix.flows), the others
	// ignore it.
	flows func(rate, firstRate float64, d time.Duration, run string) []flow
	// perRequest is the modelled engine time of one request with no cache
	// hit (prefill + a share of decode), for the ramp's first guess.
	perRequest time.Duration
	// settle is how long arrivals take to reach their steady rate (a
	// conversation's later turns follow its first).
	settle time.Duration
	// groups is how many keys (flow.Key 0…groups−1) a warm fleet has seen:
	// the warm-up lasts until each has been sent once (0: no such set;
	// every conversation is new, a trace's order is its own).
	groups int
}

// schedule is one measured run's flows and the start of its window: after
// the warm-up (t.warm, at least the workload's settle time) and, for a
// workload with groups, not before every group has been sent once and that
// request has had time to be answered (two cold requests' modelled engine
// time), bounded by t.warmMax. Above firstSightLoad of capacity the groups'
// first sights come at that load's rate (firstSightRate) and the warm-up's
// t.warm of the target rate follows them, so the window holds neither a
// first sight nor the backlog of a burst of them, and the target rate has
// run as long before it as at lower loads. It depends on the rate and
// capacity only, so every arm at a load gets the same arrivals and the
// same window; covered is false when the bound cut the warm-up short of a
// group.
func (w workload) schedule(rate, capacity float64, t timing, run string) (warm time.Duration, flows []flow, covered bool) {
	warm = max(t.warm, w.settle)
	if w.groups == 0 {
		return warm, w.flows(rate, rate, warm+t.run, run), true
	}
	limit := max(warm, t.warmMax)
	first := firstSightRate(rate, capacity)
	flows = w.flows(rate, first, limit+t.run, run)
	at, ok := coveredAt(flows, w.groups)
	if ok {
		if first < rate {
			warm += at // the target rate starts after the last first sight
		}
		warm = max(warm, at+2*w.perRequest)
	}
	if !ok || warm > limit {
		warm = limit
	}
	return warm, startingBefore(flows, warm+t.run), ok && at < warm
}

// firstSightLoad is the share of capacity at which the warm-up's first
// sights arrive at most: at 70 % load, sending the groups as the first
// arrivals left no first sight or backlog in the window, while at 150 %
// the same 32 cold prefills in 1.4 s were sometimes still queued when it
// opened.
const firstSightLoad = 0.7

// firstSightRate is the rate of a warm-up's first sights at rate: the
// rate itself up to firstSightLoad of capacity, that load's rate above
// (capacity 0: unknown, unpaced).
func firstSightRate(rate, capacity float64) float64 {
	if capacity <= 0 {
		return rate
	}
	return min(rate, firstSightLoad*capacity)
}

func (b *bench) workloads() ([]workload, error) {
	sp := sharedPrefix{Groups: 32, Prompts: 5, System: 2000, Question: 200, Output: 100}
	prompts := sp.build(b.text, b.cfg.seed)
	mt := multiTurn{Turns: 3, System: 1500, User: 200, Output: 100, Think: 300 * time.Millisecond, ConvID: true}
	noid := mt
	noid.ConvID = false
	recs, err := b.trace()
	if err != nil {
		return nil, err
	}
	eo := enginesim.DefaultOptions()
	cost := func(prompt, out int) time.Duration {
		return eo.PrefillOverhead + time.Duration(prompt)*eo.PrefillPerToken +
			time.Duration(out)*time.Duration(float64(eo.DecodeStep)*eo.LoadFactor)/time.Duration(eo.MaxNumSeqs)
	}
	seed := b.cfg.seed
	all := map[string]workload{
		"shared-prefix": {name: "shared-prefix", perRequest: cost(sp.System+sp.Question, sp.Output), groups: sp.Groups,
			flows: func(r, first float64, d time.Duration, _ string) []flow { return sp.flows(prompts, r, first, d, seed) }},
		"multi-turn": {name: "multi-turn", perRequest: cost(mt.System+2*mt.User+mt.Output, mt.Output), settle: mt.settle(),
			flows: func(r, _ float64, d time.Duration, run string) []flow { return mt.flows(b.text, r, d, seed, run) }},
		"multi-turn-noid": {name: "multi-turn-noid", perRequest: cost(mt.System+2*mt.User+mt.Output, mt.Output), settle: mt.settle(),
			flows: func(r, _ float64, d time.Duration, run string) []flow { return noid.flows(b.text, r, d, seed, run) }},
		"trace": {name: "trace", perRequest: cost(traceMeanInput(recs), 85),
			flows: func(r, _ float64, d time.Duration, _ string) []flow { return traceFlows(b.text, recs, r, d, seed, 150) }},
	}
	var out []workload
	for _, name := range b.cfg.workloadList() {
		w, ok := all[name]
		if !ok {
			return nil, fmt.Errorf("unknown workload %q", name)
		}
		out = append(out, w)
	}
	return out, nil
}

func traceMeanInput(recs []traceRecord) int {
	if len(recs) == 0 {
		return 0
	}
	s := 0
	for _, r := range recs {
		s += r.InputLength
	}
	return s / len(recs)
}

func defaultTraceGen() traceGen {
	return traceGen{Requests: 3000, Docs: 24, MaxDocBlocks: 5, MaxUnique: 2, MinOutput: 20, MaxOutput: 150, ZipfS: 1.2, NoPrefixShare: 0.15}
}

func (b *bench) trace() ([]traceRecord, error) {
	if b.cfg.traceFile != "" {
		f, err := os.Open(b.cfg.traceFile)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return readTrace(f)
	}
	recs := defaultTraceGen().generate(b.cfg.seed)
	f, err := os.Create(filepath.Join(b.dir, "trace.jsonl"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return recs, writeTrace(f, recs)
}

// bench is one benchmark run's state.
type bench struct {
	cfg     config
	dir     string
	tok     *bpe.Tokenizer // shared by the generated texts, the ideal cache and an in-process fleet
	tmpl    bpe.Template
	text    *textGen
	ideal   *idealCache
	client  *http.Client
	scrapeC *http.Client
	engines []string // http://ip:port
	gw      *gateway
	vips    map[string]string // arm → http://vip:port
	report  io.Writer
	runs    []*runSummary
	idleCPU float64 // gateway CPU seconds per second with no traffic
	hitMask []bool  // engines counted in the hit rate (nil: all)
	baseArm string  // the arm ratios are against, and the ramp runs on
	noReset bool    // an engine cannot reset its prefix cache

	// relay lets engines that dial feed two gateways (kvrelay.go).
	relay *kvRelay
}

func runBench(ctx context.Context, cfg config) error {
	began := time.Now()
	dir := filepath.Join(cfg.out, began.UTC().Format("20060102-150405"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(dir, "processes.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	reportF, err := os.Create(filepath.Join(dir, "report.txt"))
	if err != nil {
		return err
	}
	defer reportF.Close()
	b := &bench{cfg: cfg, dir: dir, client: newHTTPClient(), scrapeC: &http.Client{Timeout: 2 * time.Second},
		vips: map[string]string{}, report: io.MultiWriter(os.Stdout, reportF), baseArm: armRR}
	// The gateway starts first: it loads its tokenizer while this process
	// and the fleet load theirs.
	stateDir, err := os.MkdirTemp("", "routebench-state-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stateDir)
	var gwArgs []string
	var eppAddr string
	if cfg.epp {
		if gwArgs, eppAddr, err = eppGatewayArgs(); err != nil {
			return err
		}
	}
	gwArgs = append(gwArgs, cfg.gatewayArgs()...)
	if gwArgs, err = b.withKVRelay(gwArgs); err != nil { // kvrelay.go
		return err
	}
	defer b.relay.stop()
	if b.gw, err = launchGateway(cfg.gatewayBin, stateDir, cfg.gatewayTokenizer(), logf, gwArgs); err != nil {
		return err
	}
	defer b.gw.p.stop(5 * time.Second)

	// The fleet, with this process's tokenizer: loaded once here while the
	// gateway loads its own (a --enginesim process loads a third).
	var sim *simFleet
	defer func() { sim.stop(5 * time.Second) }()
	if cfg.enginesAt != "" {
		for _, a := range strings.Split(cfg.enginesAt, ",") {
			b.engines = append(b.engines, "http://"+strings.TrimSpace(a))
		}
	} else {
		simArgs := append([]string{"--engines", fmt.Sprint(cfg.engines), "--first-ip", cfg.firstIP, "--port", fmt.Sprint(cfg.port),
			"--zmq-port", fmt.Sprint(cfg.zmqPort), "--tokenizer", cfg.tokenizer, "--model", cfg.model}, strings.Fields(cfg.simArgs)...)
		if sim, err = launchSimFleet("enginesim", cfg.simBin, logf, simArgs); err != nil {
			return err
		}
	}
	marks := setupMarks{began: began}
	if b.tok, b.tmpl, err = enginesim.LoadTokenizer(cfg.tokenizer); err != nil {
		return err
	}
	if b.text, err = newTextGen(b.tok); err != nil {
		return err
	}
	b.ideal = &idealCache{tok: b.tok, tmpl: b.tmpl}
	marks.add("tokenizer")
	if sim != nil {
		if err := sim.ready(b.tok, b.tmpl); err != nil {
			return err
		}
		ip := netip.MustParseAddr(cfg.firstIP)
		for range cfg.engines {
			b.engines = append(b.engines, fmt.Sprintf("http://%s:%d", ip, cfg.port))
			ip = ip.Next()
		}
	}
	marks.add("fleet")

	// One rule per arm on its own VIP.
	if err := b.gw.waitAPI(); err != nil {
		return err
	}
	marks.add("gateway ready")
	vip := netip.MustParseAddr(cfg.vipBase)
	for _, arm := range []string{armRR, armLeast, armPrefix, armKV} {
		if err := b.gw.apply(armRule(arm, vip.String(), cfg.vipPort, b.engines, cfg.zmqPort, nil)); err != nil {
			return fmt.Errorf("arm %s: %w", arm, err)
		}
		b.vips[arm] = fmt.Sprintf("http://%s:%d", vip, cfg.vipPort)
		vip = vip.Next()
	}
	for _, ext := range cfg.externalArms {
		name, u, _ := strings.Cut(ext, "=")
		b.vips[name] = strings.TrimSuffix(u, "/")
	}
	if cfg.epp {
		stopEPP, err := b.startEPPArm(eppAddr)
		if err != nil {
			return fmt.Errorf("arm %s: %w", armEPPKV, err)
		}
		defer stopEPP()
	}
	stopExt, err := b.startExternalEPPs()
	if err != nil {
		return err
	}
	defer stopExt()
	marks.add("rules")
	for arm, u := range b.vips {
		if err := waitServing(ctx, b.scrapeC, u, cfg.model, 20*time.Second); err != nil {
			return fmt.Errorf("arm %s: %w", arm, err)
		}
	}
	marks.add("arms serving")
	if err := b.waitSubscribed(ctx, 20*time.Second); err != nil {
		return err
	}
	marks.add("KV subscriptions")

	idleFrom := b.gw.cpu()
	time.Sleep(3 * time.Second)
	b.idleCPU = (b.gw.cpu() - idleFrom).Seconds() / 3
	marks.add("idle CPU")

	if ran, err := b.flowScenarios(ctx, vip); ran { // flowctl.go: overload-classes, tenant-fairness
		return err
	}
	ws, err := b.workloads()
	if err != nil {
		return err
	}
	t := cfg.timing()
	fmt.Fprintf(b.report, "routebench: %d engines (%s), gateway %s (idle CPU %.1f ms/s), results in %s, mode %s, set up in %s\n",
		len(b.engines), strings.Join(b.engines, " "), b.gw.api, b.idleCPU*1000, dir, map[bool]string{true: "short", false: "full"}[cfg.short], marks)
	if err := b.phase(ctx, ws, t, ""); err != nil {
		return err
	}
	if err := b.busyPhase(ctx, t, logf); err != nil { // busy.go
		return err
	}
	if cfg.pd && cfg.enginesAt == "" && ctx.Err() == nil {
		if err := b.pdPhase(ctx, ws, t, logf, vip); err != nil {
			return err
		}
	}
	writeCPUPairs(b.report, cpuPairs(b.runs, armRR), b.idleCPU*1000) // cpuratio.go
	if err := writeFile(filepath.Join(dir, "summary.json"), b.runs); err != nil {
		return err
	}
	fmt.Fprintf(b.report, "\nroutebench: done in %v; raw results in %s\n", time.Since(began).Round(time.Second), dir)
	stopAll(5*time.Second, sim, b.gw.p)
	return ctx.Err()
}

// setupMarks times the set-up's phases, for the report: on a busy box
// they, not the measured runs, are what grows.
type setupMarks struct {
	began, last time.Time
	parts       []string
}

func (m *setupMarks) add(phase string) {
	from := m.last
	if from.IsZero() {
		from = m.began
	}
	m.last = time.Now()
	m.parts = append(m.parts, fmt.Sprintf("%s %.1f s", phase, m.last.Sub(from).Seconds()))
}

func (m setupMarks) String() string {
	return fmt.Sprintf("%.1f s (%s)", m.last.Sub(m.began).Seconds(), strings.Join(m.parts, ", "))
}

// phase runs every workload's plan on the current fleet; prefix names
// the P/D variant's workloads ("pd-").
func (b *bench) phase(ctx context.Context, ws []workload, t timing, prefix string) error {
	capacities := map[string]float64{}
	var first workload
	var firstCap float64
	for _, w := range ws {
		if ctx.Err() != nil {
			break
		}
		pl := b.cfg.planFor(prefix + w.name)
		if len(pl.loads) == 0 {
			continue
		}
		w.name = prefix + w.name
		// The two multi-turn variants are the same load: one ramp.
		key := strings.TrimSuffix(w.name, "-noid")
		capacity, ok := capacities[key]
		if !ok && b.cfg.short && first.name != "" {
			// Short mode ramps once and scales by the modelled cost of a
			// request; the full run measures every workload.
			capacity, ok = firstCap*first.perRequest.Seconds()/w.perRequest.Seconds(), true
			fmt.Fprintf(b.report, "  capacity %s: %.1f req/s scaled from %s's ramp by the modelled request cost\n", w.name, capacity, first.name)
		}
		if !ok {
			var err error
			if capacity, err = b.ramp(ctx, w, t); err != nil {
				return err
			}
			capacities[key] = capacity
			if first.name == "" {
				first, firstCap = w, capacity
			}
		}
		var rows []*runSummary
		for _, la := range pl.loads {
			rate := la.frac * capacity
			for _, arm := range la.arms {
				if ctx.Err() != nil {
					break
				}
				if s := b.sameRun(w.name, arm, la.frac, rate); s != nil {
					rows = append(rows, s)
					continue
				}
				s, err := b.measure(ctx, w, arm, la.frac, rate, t)
				if err != nil {
					return err
				}
				rows = append(rows, s)
			}
		}
		b.table(w.name, capacity, rows)
	}
	return nil
}

// sameArrivals maps a workload to the one whose arrivals it repeats with
// only a request header changed: the multi-turn variant without
// X-Conversation-Id sends the same conversations at the same times (same
// seed, same capacity, so the same rate) as the one with it.
var sameArrivals = map[string]string{"multi-turn-noid": "multi-turn"}

// readsNoHeader reports whether arm's choice reads no request header, so
// that a workload differing from another only in a header is, for it, the
// same experiment: round robin and the client-pinned ideal.
func readsNoHeader(arm string) bool { return arm == armRR || arm == armIdeal }

// sameRun is the run of workload at load already measured for arm under
// another name (sameArrivals, readsNoHeader), recorded again under this
// workload's name and marked SameAs; nil when it must be measured. It
// saves the noid variant's round-robin run (≈ 18 s of the full run).
func (b *bench) sameRun(workload, arm string, frac, rate float64) *runSummary {
	other, ok := sameArrivals[workload]
	if !ok || !readsNoHeader(arm) {
		return nil
	}
	for _, r := range b.runs {
		if r.Workload == other && r.Arm == arm && r.Load == frac && r.Rate == rate && r.SameAs == "" {
			s := *r
			s.Workload, s.SameAs = workload, other
			b.runs = append(b.runs, &s)
			fmt.Fprintf(b.report, "  %-16s %4.0f%% %-7s the %s run above: same arrivals, and %s reads no X-Conversation-Id\n", workload, frac*100, arm, other, arm)
			return &s
		}
	}
	return nil
}

// pdPhase starts a 4P4D fleet (half the engines prefill, half decode) on
// the next addresses, puts the P/D arms in front of it and runs the P/D
// plans. The hit rate counts the prefill engines: the decodes only pull.
func (b *bench) pdPhase(ctx context.Context, ws []workload, t timing, logf io.Writer, vip netip.Addr) error {
	cfg := b.cfg
	n := cfg.engines / 2
	first := netip.MustParseAddr(cfg.pdFirstIP)
	args := []string{"--engines", "0", "--prefill", fmt.Sprint(n), "--decode", fmt.Sprint(n), "--first-ip", first.String(),
		"--port", fmt.Sprint(cfg.port), "--zmq-port", fmt.Sprint(cfg.zmqPort), "--tokenizer", cfg.tokenizer, "--model", cfg.model}
	args = append(args, strings.Fields(cfg.simArgs)...)
	sim, err := launchSimFleet("enginesim-pd", cfg.simBin, logf, args)
	if err != nil {
		return err
	}
	defer sim.stop(5 * time.Second)
	if err := sim.ready(b.tok, b.tmpl); err != nil {
		return err
	}
	b.engines, b.hitMask = nil, nil
	var roles []int
	ip := first
	for i := range 2 * n {
		b.engines = append(b.engines, fmt.Sprintf("http://%s:%d", ip, cfg.port))
		b.hitMask = append(b.hitMask, i < n)
		roles = append(roles, map[bool]int{true: 1, false: 2}[i < n])
		ip = ip.Next()
	}
	b.baseArm = armPDLeast
	for _, arm := range []string{armPDLeast, armPDPrefix, armPDKV} {
		if err := b.serveArm(ctx, b.gw, arm, vip, roles); err != nil {
			return err
		}
		vip = vip.Next()
	}
	// The single-pool KV rule keeps its 8 subscriptions; pd-kv adds one per
	// prefill.
	if err := b.waitSubscribedN(ctx, cfg.engines+n, 20*time.Second); err != nil {
		return err
	}
	fmt.Fprintf(b.report, "\nroutebench: P/D variant, %dP%dD (%s)\n", n, n, strings.Join(b.engines, " "))
	return b.phase(ctx, ws, t, "pd-")
}

// readsNoInventory reports whether arm's choice reads nothing of the
// gateway's KV-event inventory (its cache resets need not reach the
// gateway before the run): round robin, least connections, CHWBL, the
// radix-index P/D tier and the pinned ideal. Other arms, external ones
// included, wait.
func readsNoInventory(arm string) bool {
	switch arm {
	case armRR, armLeast, armPrefix, armIdeal, armPDLeast, armPDPrefix:
		return true
	}
	return false
}

// waitSubscribed waits until the KV-exact rule's subscribers are connected
// to every engine.
func (b *bench) waitSubscribed(ctx context.Context, timeout time.Duration) error {
	if b.cfg.foreign.bindAddr != "" { // foreign.go
		return b.primeEngines(ctx, b.gw, timeout)
	}
	return b.waitSubscribedN(ctx, len(b.engines), timeout)
}

func (b *bench) waitSubscribedN(ctx context.Context, want int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		m, err := b.gw.metrics(ctx, b.scrapeC)
		if err == nil && int(m.sum("loxilb_kv_subscriber_connected")) >= want {
			return nil
		}
		time.Sleep(250 * time.Millisecond)
	}
	return errors.New("KV-exact subscribers not connected to every engine")
}

// resetFleet empties every engine's prefix cache (and so the KV-exact
// inventory, through AllBlocksCleared) so that each arm starts cold.
func (b *bench) resetFleet(ctx context.Context) error { return b.resetCaches(ctx, true) }

// resetCaches is resetFleet; without inventory it does not wait for
// AllBlocksCleared to reach the gateway, for an arm that reads no KV
// inventory (readsNoInventory).
func (b *bench) resetCaches(ctx context.Context, inventory bool) error {
	deadline := time.Now().Add(20 * time.Second)
	slept := false
	for _, e := range b.engines {
		for {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e+"/reset_prefix_cache", nil)
			resp, err := b.scrapeC.Do(req)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
				if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed {
					// An engine without vLLM's dev endpoint: try its sleep
					// mode (foreign.go), else arms share warm caches and the
					// report says so.
					if err := b.sleepReset(ctx, e); err == nil {
						slept = true
						break
					}
					if !b.noReset {
						fmt.Fprintf(b.report, "  warning: %s has no POST /reset_prefix_cache; caches are not reset between arms\n", e)
					}
					b.noReset = true
					break
				}
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("reset %s: engine still busy", e)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	if inventory {
		time.Sleep(300 * time.Millisecond) // AllBlocksCleared reaches the gateway
	}
	if slept {
		time.Sleep(sleepResetFlush)
	}
	return nil
}

// ramp finds the highest rate round robin sustains (TTFT p90 within the
// SLO, ≥ 95 % of requests answered): the fleet's capacity for w.
func (b *bench) ramp(ctx context.Context, w workload, t timing) (float64, error) {
	computing := len(b.engines) // engines that prefill
	if b.hitMask != nil {
		computing = 0
		for _, m := range b.hitMask {
			if m {
				computing++
			}
		}
	}
	guess := float64(computing) / w.perRequest.Seconds()
	capacity, lowest := 0.0, t.rampSteps[0]
	var passed []bool
	for {
		f, more := rampNext(t.rampSteps, t.rampBelow, passed)
		if !more {
			break
		}
		lowest = min(lowest, f)
		rate := guess * f
		began := time.Now()
		if err := b.resetCaches(ctx, !readsNoInventory(b.baseArm)); err != nil {
			return 0, err
		}
		warm := max(t.rampWarm, w.settle)
		flows := w.flows(rate, rate, warm+t.rampStep, fmt.Sprintf("ramp-%s-%.1f", w.name, rate))
		rctx, cancel := context.WithTimeout(ctx, warm+t.rampStep+t.rampDrain)
		// The step ends once its verdict is known: its requests are done,
		// or too many waited past the SLO for any p90 to pass.
		maxIn := 0
		for _, f := range startingBefore(flows, warm+t.rampStep) {
			maxIn += f.requests()
		}
		rn := &runner{client: b.client, model: b.cfg.model,
			cut: cutRule{From: warm.Seconds(), Until: (warm + t.rampStep).Seconds(), SLO: b.cfg.ttftSLO.Seconds(), MaxIn: maxIn}}
		all := rn.run(rctx, target{Arm: b.baseArm, VIP: b.vips[b.baseArm]}, flows)
		cancel()
		// Judge the requests sent inside the step, after the warm-up:
		// later turns of a conversation may be cut by the step's end
		// without any overload.
		var res []*result
		for _, r := range all {
			if r.Start >= warm.Seconds() && r.Start < (warm+t.rampStep).Seconds() {
				res = append(res, r)
			}
		}
		st := summarise(res, t.rampStep, b.cfg)
		pass := st.N > 0 && float64(st.OK) >= 0.95*float64(st.N) && st.TTFT.P90 <= b.cfg.ttftSLO.Seconds()
		fmt.Fprintf(b.report, "  ramp %-16s %6.2f req/s: %3d sent, %3d ok, TTFT p90 %6.3fs → %s  %.0fs\n", w.name, rate, st.N, st.OK, st.TTFT.P90,
			map[bool]string{true: "ok", false: "over"}[pass], time.Since(began).Seconds())
		passed = append(passed, pass)
		if pass {
			capacity = max(capacity, rate)
		}
	}
	if capacity == 0 {
		capacity = guess * lowest * 0.7
	}
	return capacity, nil
}

// snapshot is the counters a run's measurement starts from.
type snapshot struct {
	engines []series
	gw      series
	cpu     time.Duration
	at      time.Time
	err     error
}

func (b *bench) snapshot(ctx context.Context) snapshot {
	var s snapshot
	s.engines, s.err = fleetScrape(ctx, b.scrapeC, b.engines)
	s.gw, _ = b.gw.metrics(ctx, b.scrapeC)
	s.cpu, s.at = b.gw.cpu(), time.Now()
	return s
}

// measure runs one arm at one load: a warm-up (the same arrival process,
// not counted) so that caches reach their steady state, then the measured
// window, then a bounded drain.
func (b *bench) measure(ctx context.Context, w workload, arm string, frac, rate float64, t timing) (*runSummary, error) {
	if err := b.resetCaches(ctx, !readsNoInventory(arm)); err != nil {
		return nil, err
	}
	tgt := target{Arm: arm, VIP: b.vips[arm]}
	if arm == armIdeal {
		tgt.Engines = b.engines
	}
	warm, flows, covered := w.schedule(rate, rate/frac, t, fmt.Sprintf("%s-%.1f-%s", w.name, frac, arm))
	t.warm = warm
	b.ideal.blocks = map[uint64]struct{}{}
	// The run ends when the window's requests are done: a conversation's
	// turns after the window are not measured.
	rn := &runner{client: b.client, model: b.cfg.model, ideal: b.ideal,
		cut: cutRule{From: t.warm.Seconds(), Until: (t.warm + t.run).Seconds()}}
	rctx, cancel := context.WithTimeout(ctx, t.warm+t.run+t.drain)
	defer cancel()
	sctx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan *loadSampler, 1)
	snap := make(chan snapshot, 1)
	go func() {
		select {
		case <-time.After(t.warm):
		case <-sctx.Done():
		}
		snap <- b.snapshot(ctx)
		sampled <- sampleLoad(sctx, b.scrapeC, b.engines, 500*time.Millisecond)
	}()
	started := time.Now()
	all := rn.run(rctx, tgt, flows)
	elapsed := time.Since(started)
	cancel()
	stopSampling()
	before, load := <-snap, <-sampled
	if before.err != nil {
		return nil, before.err
	}
	after := b.snapshot(ctx)
	if after.err != nil {
		return nil, after.err
	}
	var res []*result
	for _, r := range all {
		// The measured window: later turns started while draining are
		// not part of the offered load.
		if r.Start >= t.warm.Seconds() && r.Start < (t.warm+t.run).Seconds() {
			res = append(res, r)
		}
	}
	s := summarise(res, t.run, b.cfg)
	s.Workload, s.Arm, s.Load, s.Rate, s.Elapsed = w.name, arm, frac, rate, elapsed.Seconds()
	s.Warm, s.Window, s.Covered = t.warm.Seconds(), t.run.Seconds(), covered
	s.Tail = tailNotes(all, res)
	var q, h float64
	for i := range b.engines {
		d := delta(before.engines[i], after.engines[i])
		if b.hitMask == nil || b.hitMask[i] {
			q += d.sum("vllm:prefix_cache_queries_total")
			h += d.sum("vllm:prefix_cache_hits_total")
		}
		s.Served = append(s.Served, d.sum("vllm:request_success_total"))
	}
	if q > 0 {
		s.HitRate = h / q
	}
	s.spread(load)
	if arm != armIdeal && s.N > 0 {
		// Net of what the gateway burns idle (probes, metrics) over the
		// same time: the CPU the requests cost.
		gross := (after.cpu - before.cpu).Seconds()
		idle := b.idleCPU * after.at.Sub(before.at).Seconds()
		s.Gateway = delta(before.gw, after.gw)
		s.GatewayAnswered = int(s.Gateway.sum(gatewayRequests))
		per := float64(s.N)
		if s.GatewayAnswered > 0 { // cpuratio.go: the same interval as the CPU read
			per = float64(s.GatewayAnswered)
		}
		s.CPUGrossPerReqMs = gross * 1000 / per
		s.CPUPerReqMs = max(0, gross-idle) * 1000 / per
	}
	b.runs = append(b.runs, s)
	if err := b.saveRequests(s, all); err != nil {
		return nil, err
	}
	fmt.Fprintf(b.report, "  %-16s %4.0f%% %-7s n=%-4d ok=%-4d ttft p50 %6.3f p99 %6.3f  hit %.3f (ideal %.3f)  %.0fs\n",
		w.name, frac*100, arm, s.N, s.OK, s.TTFT.P50, s.TTFT.P99, s.HitRate, s.IdealHitRate, elapsed.Seconds())
	return s, nil
}

func (b *bench) saveRequests(s *runSummary, res []*result) error {
	f, err := os.Create(filepath.Join(b.dir, fmt.Sprintf("requests-%s-%.0f-%s.jsonl", s.Workload, s.Load*100, s.Arm)))
	if err != nil {
		return err
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	for _, r := range res {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}
