// Command routebench measures routing quality: it starts a fleet of
// simulated vLLM engines (test/enginesim) and infergate, puts one rule per
// arm in front of the same engines (round robin, least connections, CHWBL
// prefix affinity, KV-exact), replays workloads (shared prefix, multi-turn
// with and without X-Conversation-Id, a Mooncake-format trace) at ~70 % and
// ~150 % of the fleet's measured capacity, and reports what a client sees
// (TTFT, ITL, goodput), the fleet's prefix-cache hit rate from the engines'
// own counters, the spread of work, and the gateway's CPU per request, as
// ratios against round robin in the same run. An "ideal" arm pins every
// group or conversation to one engine, bypassing the gateway.
//
//	routebench --gateway bin/infergate --enginesim bin/enginesim        # full, < 10 min
//	BENCH_SHORT=1 routebench ...                                        # ≈ 2 min
//	routebench gen-trace -n 500 > trace.jsonl                           # a Mooncake-style trace
//	routebench --engines-at 127.0.0.21:8000,... --zmq-port 5557         # engines someone else runs
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "gen-trace" {
		if err := genTraceCmd(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "routebench:", err)
			os.Exit(1)
		}
		return
	}
	cfg := defaultConfig()
	cfg.flags(flag.CommandLine)
	flag.Parse()
	if v := os.Getenv("BENCH_SHORT"); v != "" && v != "0" {
		cfg.short = true
	}
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if cfg.short && !set["workloads"] {
		cfg.workloads = "shared-prefix,multi-turn"
	}
	if cfg.short && !set["pd"] {
		cfg.pd = false
	}
	if err := cfg.busy.check(); err != nil {
		fmt.Fprintln(os.Stderr, "routebench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := runBench(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "routebench:", err)
		os.Exit(1)
	}
}

func genTraceCmd(args []string) error {
	fs := flag.NewFlagSet("gen-trace", flag.ContinueOnError)
	g := defaultTraceGen()
	n := fs.Int("n", 1000, "records")
	seed := fs.Uint64("seed", 1, "seed")
	fs.IntVar(&g.Docs, "docs", g.Docs, "shared prefixes")
	fs.Float64Var(&g.ZipfS, "zipf", g.ZipfS, "Zipf exponent of prefix popularity (>1)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	g.Requests = *n
	return writeTrace(os.Stdout, g.generate(*seed))
}

// config is the whole benchmark's setup.
type config struct {
	gatewayBin, simBin, tokenizer, out, model string
	engines                                   int
	pd                                        bool
	firstIP, pdFirstIP, vipBase               string
	port, zmqPort, vipPort                    int
	enginesAt                                 string
	foreign                                   foreignConfig // foreign.go: engines someone else runs
	traceFile                                 string
	workloads                                 string
	short                                     bool
	seed                                      uint64
	ttftSLO, itlSLO                           time.Duration
	simArgs                                   string
	externalArms                              stringList
	externalEPPs                              stringList // externalepp.go
	window                                    time.Duration
	arms                                      string
	epp                                       bool
	busy                                      busyConfig // busy.go
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

func defaultConfig() config {
	return config{gatewayBin: "bin/infergate", simBin: "bin/enginesim", tokenizer: "kvexact/bpe/testdata/qwen3",
		out: "test/bench/results", model: "sim-8b", engines: 8, pd: true, firstIP: "127.0.0.101", pdFirstIP: "127.0.0.111", vipBase: "127.0.0.201",
		port: 18000, zmqPort: 15557, vipPort: 18080, seed: 1, ttftSLO: 2 * time.Second, itlSLO: 50 * time.Millisecond,
		workloads: "shared-prefix,multi-turn,multi-turn-noid,trace", busy: defaultBusyConfig()}
}

func (c *config) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.gatewayBin, "gateway", c.gatewayBin, "infergate binary")
	fs.StringVar(&c.simBin, "enginesim", c.simBin, "enginesim binary: the simulated fleet runs as a process of its own; \"\": in this process on its loaded tokenizer (one tokenizer load fewer, but on a busy 2-core box the client and the fleet then share one process's CPU and the kv arm backed up at 150 %)")
	fs.StringVar(&c.tokenizer, "tokenizer", c.tokenizer, "tokenizer directory shared by engines, gateway and text generator")
	fs.StringVar(&c.out, "out", c.out, "results directory (a timestamped run directory is made inside)")
	fs.StringVar(&c.model, "model", c.model, "model name sent in requests")
	fs.IntVar(&c.engines, "engines", c.engines, "simulated engines")
	fs.BoolVar(&c.pd, "pd", c.pd, "also run the P/D variant (engines/2 prefill + engines/2 decode; not in the short mode)")
	fs.StringVar(&c.pdFirstIP, "pd-first-ip", c.pdFirstIP, "address of the first engine of the P/D fleet")
	fs.StringVar(&c.firstIP, "first-ip", c.firstIP, "address of the first simulated engine")
	fs.StringVar(&c.vipBase, "vip-base", c.vipBase, "address of the first arm's VIP")
	fs.IntVar(&c.port, "port", c.port, "engine HTTP port")
	fs.IntVar(&c.zmqPort, "zmq-port", c.zmqPort, "engine KV-event port")
	fs.IntVar(&c.vipPort, "vip-port", c.vipPort, "VIP port")
	fs.StringVar(&c.enginesAt, "engines-at", c.enginesAt, "comma-separated ip:port of engines already running (no simulator is started)")
	fs.StringVar(&c.traceFile, "trace", c.traceFile, "Mooncake-format JSONL trace to replay (default: generated)")
	fs.StringVar(&c.workloads, "workloads", c.workloads, "comma-separated: shared-prefix, multi-turn, multi-turn-noid, trace")
	fs.BoolVar(&c.short, "short", c.short, "the ≈2-minute variant (also BENCH_SHORT=1)")
	fs.Uint64Var(&c.seed, "seed", c.seed, "seed of every workload")
	fs.DurationVar(&c.ttftSLO, "ttft-slo", c.ttftSLO, "goodput: TTFT bound")
	fs.DurationVar(&c.itlSLO, "itl-slo", c.itlSLO, "goodput: mean inter-token latency bound")
	fs.StringVar(&c.simArgs, "enginesim-args", c.simArgs, "extra enginesim flags (space-separated)")
	fs.DurationVar(&c.window, "window", c.window, "measured window of every run (0: 7s, short 5s); longer windows steady the p99s beyond the 10-minute budget (below 100 measured requests a p99 is the slowest one)")
	fs.StringVar(&c.arms, "arms", c.arms, "comma-separated arms to run (default: each workload's plan)")
	fs.BoolVar(&c.epp, "epp", c.epp, "add the epp-kv arm: the kv arm's rule asked over ext_proc (the gateway as endpoint picker) by an Envoy-like data plane in this process; run at every load of the single-pool workloads (not in the short mode's fixed plan)")
	c.busy.flags(fs)
	c.foreign.flags(fs)
	fs.Var(&c.externalEPPs, "external-epp", "NAME=host:port: an extra arm routed by someone else's ext_proc endpoint picker over the same engines, through an Envoy-like data plane in this process; repeatable, run where external arms run")
	fs.Var(&c.externalArms, "external-arm", "NAME=http://ip:port: an extra arm served by someone else's router in front of the same engines (e.g. another endpoint picker behind its proxy); repeatable, run at every load of the single-pool workloads")
}

func (c *config) workloadList() []string {
	var out []string
	for _, w := range strings.Split(c.workloads, ",") {
		if w = strings.TrimSpace(w); w != "" {
			out = append(out, w)
		}
	}
	return out
}
