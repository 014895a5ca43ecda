package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/infergate/infergate/daemon"
	"github.com/infergate/infergate/epp"
	"github.com/sirupsen/logrus"
)

// poolRule is the rule the served EPP picks from: n endpoints on loopback
// addresses (endpointIP) and ports nothing listens on (a pick never
// contacts an engine), no probes (so all are usable), and with kv KV-exact
// mode 3 (tokenize the prompt in process, hash its blocks, score every
// endpoint's inventory, fed by the engines' KV events on zmqPort) before
// least connections.
func poolRule(name string, net *netPlan, vipPort, n, firstPort int, kv bool, zmqPort int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: infergate/v1\nkind: Loadbalancer\nmetadata:\n  name: %s\nspec:\n  serviceArguments:\n", name)
	fmt.Fprintf(&b, "    externalIP: %s\n    port: %d\n    protocol: tcp\n    mode: 4\n    sel: 4\n", net.host(), vipPort)
	if kv {
		fmt.Fprintf(&b, "    kvExactMode: 3\n    kvEngineType: vllm\n    kvZmqPort: %d\n    kvBlockSize: %d\n", zmqPort, kvBlockSize)
	}
	b.WriteString("  endpoints:\n")
	for i := range n {
		fmt.Fprintf(&b, "    - {endpointIP: %s, targetPort: %d, weight: 1}\n", net.endpointIP(i), firstPort+i)
	}
	return b.String()
}

// serveCmd runs the daemon as an EPP over poolRule, in its own process so
// the driver can read its CPU time alone. With KV events, fake engines
// publish what each endpoint holds of the driver's workload (kvFeed, same
// -prefixes and -body-bytes as the driver's) and serving waits until every
// inventory is trusted. It prints "ready" once listening,
// and serves its own runtime counters on --stats-addr (GET /stats, with
// ?gc=1 after a forced collection): allocations and the live heap, which the
// daemon's /metrics does not expose.
func serveCmd(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	addr := fs.String("epp-addr", "127.0.0.1:19002", "ext_proc listener")
	haddr := fs.String("epp-health-addr", "127.0.0.1:19003", "gRPC health listener")
	stats := fs.String("stats-addr", "127.0.0.1:19004", "runtime counters (GET /stats)")
	n := fs.Int("endpoints", 16, "endpoints in the pool")
	kv := fs.Bool("kv", true, "KV-exact mode 3 (in-process tokenizer)")
	kvEvents := fs.Bool("kv-events", true, "with -kv: fake engines publish KV events, so the inventories hold the workload's prefixes")
	kvZmqPort := fs.Int("kv-zmq-port", 0, "with -kv-events: the port where another process (the driver) runs the fake engines' publishers; 0: run them in this process")
	prefixes := fs.Int("prefixes", 64, "the driver's -prefixes (what the fake engines hold)")
	bodyBytes := fs.Int("body-bytes", 8<<10, "the driver's -body-bytes")
	tok := fs.String("tokenizer", "kvexact/bpe/testdata/qwen3", "tokenizer directory for KV-exact")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile here until exit")
	memprofile := fs.String("memprofile", "", "write an allocation profile here at exit")
	traceOut := fs.String("trace", "", "write a runtime execution trace here until exit (go tool trace: each pick's hand-offs between gRPC's reader, the stream and gRPC's writer)")
	workers := fs.Int("stream-workers", epp.DefaultStreamWorkers, "long-lived goroutines serving streams (0: one per stream)")
	tr := epp.DefaultOptions().Transport
	fs.Func("epp-stream-window", "the EPP's --epp-stream-window", int32Flag(&tr.StreamWindow))
	fs.Func("epp-conn-window", "the EPP's --epp-conn-window", int32Flag(&tr.ConnWindow))
	fs.IntVar(&tr.WriteBuffer, "epp-write-buffer", tr.WriteBuffer, "the EPP's --epp-write-buffer")
	fs.IntVar(&tr.ReadBuffer, "epp-read-buffer", tr.ReadBuffer, "the EPP's --epp-read-buffer")
	fs.Func("epp-max-concurrent-streams", "the EPP's --epp-max-concurrent-streams", uint32Flag(&tr.MaxConcurrentStreams))
	ip := fs.String("ip", "127.0.0.1", "loopback IP of the API and the rule's VIP; the endpoints take the next ones")
	portBase := fs.Int("port-base", 0, "first of the ports to take for the VIP, the KV events, the API and the endpoints (0: free ports)")
	picker := fs.String("picker", "rule", "rule: the daemon picking from the pool rule; trivial: the ext_proc server alone with a picker that returns one fixed endpoint (a baseline of gRPC, the protocol and the machine, without the pick)")
	if err := parseAll(fs, args); err != nil {
		return err
	}
	if *picker == "trivial" {
		o := epp.DefaultOptions()
		o.Addr, o.HealthAddr, o.StreamWorkers, o.Transport = *addr, *haddr, *workers, tr
		return serveTrivial(o, *stats)
	} else if *picker != "rule" {
		return fmt.Errorf("-picker %q: want rule or trivial", *picker)
	}
	plan, err := newNetPlan(*ip, *portBase, *n)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "eppload-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	vip, err := plan.port()
	if err != nil {
		return err
	}
	rules := filepath.Join(dir, "pool.yaml")
	zmqPort := 15999
	var feed *kvFeed
	fed := *kv && *kvEvents // the inventories are fed: wait until they are trusted
	switch {
	case fed && *kvZmqPort > 0:
		zmqPort = *kvZmqPort
	case fed:
		if zmqPort, err = plan.port(); err != nil {
			return err
		}
		if feed, err = startKVFeed(plan, *n, zmqPort, newWorkload(*prefixes, *bodyBytes), *tok); err != nil {
			return err
		}
		defer feed.close()
		go feed.run()
	}
	firstPort := 20001 // nothing listens there: a pick never contacts an engine
	if *portBase > 0 {
		firstPort = *portBase + 16 // after the VIP, KV and API ports, inside the range
	}
	if err := os.WriteFile(rules, []byte(poolRule("epp-bench", plan, vip, *n, firstPort, *kv, zmqPort)), 0o600); err != nil {
		return err
	}
	apiAddr, err := plan.addr()
	if err != nil {
		return err
	}
	api, err := net.Listen("tcp", apiAddr)
	if err != nil {
		return fmt.Errorf("API listener: %w", err)
	}
	opts := daemon.DefaultOptions()
	opts.StateDir = filepath.Join(dir, "state")
	opts.APIAddr = api.Addr().String()
	opts.APIListener = api
	opts.RulesPath = rules
	opts.LogLevel = "warn"
	opts.EPP.Addr, opts.EPP.HealthAddr = *addr, *haddr
	opts.EPP.StreamWorkers = *workers
	opts.EPP.Transport = tr
	opts.EPPRule = "epp-bench"
	if *kv {
		opts.KV.Tokenizers = map[string]string{"": *tok}
	}
	if *traceOut != "" {
		f, err := os.Create(*traceOut)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := trace.Start(f); err != nil {
			return err
		}
		defer trace.Stop()
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	sl, err := net.Listen("tcp", *stats)
	if err != nil {
		return err
	}
	go func() { _ = http.Serve(sl, http.HandlerFunc(serveStats)) }()
	defer sl.Close()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := logrus.New()
	log.SetLevel(logrus.WarnLevel)
	done := make(chan error, 1)
	go func() { done <- daemon.Run(ctx, opts, log) }()
	if fed {
		if err := waitKVTrusted(opts.APIAddr, *n, 60*time.Second); err != nil {
			stop()
			<-done
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "eppload serve: API and /metrics on %s\n", opts.APIAddr)
	fmt.Println("ready")
	err = <-done
	if *memprofile != "" {
		if f, ferr := os.Create(*memprofile); ferr == nil {
			_ = pprof.Lookup("allocs").WriteTo(f, 0)
			f.Close()
		}
	}
	return err
}

// fixedPicker answers every pick with one endpoint and does nothing else.
type fixedPicker struct{ res epp.Result }

func (p fixedPicker) Pick(context.Context, *epp.Request) (epp.Result, error) { return p.res, nil }
func (fixedPicker) Served(epp.Outcome)                                       {}

// serveTrivial serves ext_proc with fixedPicker until SIGTERM.
func serveTrivial(o epp.Options, statsAddr string) error {
	s, err := epp.New(o, fixedPicker{epp.Result{Endpoints: []string{"127.0.0.2:20001", "127.0.0.3:20002"}}}, nil)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return fmt.Errorf("ext_proc listener: %w", err)
	}
	hlis, err := net.Listen("tcp", o.HealthAddr)
	if err != nil {
		lis.Close()
		return fmt.Errorf("health listener: %w", err)
	}
	sl, err := net.Listen("tcp", statsAddr)
	if err != nil {
		lis.Close()
		hlis.Close()
		return fmt.Errorf("stats listener: %w", err)
	}
	go func() { _ = http.Serve(sl, http.HandlerFunc(serveStats)) }()
	defer sl.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s.SetReady(true)
	fmt.Println("ready")
	return s.Serve(ctx, lis, hlis)
}

func int32Flag(p *int32) func(string) error {
	return func(s string) error {
		n, err := strconv.ParseInt(s, 0, 32)
		*p = int32(n)
		return err
	}
}

func uint32Flag(p *uint32) func(string) error {
	return func(s string) error {
		n, err := strconv.ParseUint(s, 0, 32)
		*p = uint32(n)
		return err
	}
}

// runtimeStats are the served process's own counters.
type runtimeStats struct {
	AllocObjects uint64 `json:"alloc_objects"` // cumulative heap allocations
	AllocBytes   uint64 `json:"alloc_bytes"`
	HeapLive     uint64 `json:"heap_live"` // live heap bytes (after the forced GC with ?gc=1)
	GCCycles     uint64 `json:"gc_cycles"`
	Goroutines   int    `json:"goroutines"`
	// For -tail: how long goroutines waited for a P, the collector's
	// stop-the-world pauses, its CPU and its assists, and (with ?gcs=1)
	// when each remembered cycle ended.
	SchedLatency hist      `json:"sched_latency"`
	GCPauses     hist      `json:"gc_pauses"`
	GCCPU        float64   `json:"gc_cpu_seconds"`
	AssistCPU    float64   `json:"gc_assist_cpu_seconds"`
	TotalCPU     float64   `json:"total_cpu_seconds"`
	MutexWait    float64   `json:"mutex_wait_seconds"` // goroutines blocked on sync.Mutex/RWMutex, summed
	GCs          []gcCycle `json:"gcs,omitempty"`
}

func serveStats(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("gc") == "1" {
		runtime.GC()
		runtime.GC() // a second cycle frees what the first one's finalizers released
	}
	w.Header().Set("Content-Type", "application/json")
	st := readRuntimeStats()
	if r.URL.Query().Get("gcs") == "1" {
		st.GCs = gcCycles()
	}
	_ = json.NewEncoder(w).Encode(st)
}

func readRuntimeStats() runtimeStats {
	s := []metrics.Sample{
		{Name: "/gc/heap/allocs:objects"}, {Name: "/gc/heap/allocs:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/cycles/total:gc-cycles"},
		{Name: "/sched/latencies:seconds"}, {Name: "/sched/pauses/total/gc:seconds"},
		{Name: "/cpu/classes/gc/total:cpu-seconds"}, {Name: "/cpu/classes/gc/mark/assist:cpu-seconds"},
		{Name: "/cpu/classes/total:cpu-seconds"}, {Name: "/sync/mutex/wait/total:seconds"},
	}
	metrics.Read(s)
	return runtimeStats{AllocObjects: s[0].Value.Uint64(), AllocBytes: s[1].Value.Uint64(),
		HeapLive: s[2].Value.Uint64(), GCCycles: s[3].Value.Uint64(), Goroutines: runtime.NumGoroutine(),
		SchedLatency: toHist(s[4].Value.Float64Histogram()), GCPauses: toHist(s[5].Value.Float64Histogram()),
		GCCPU: s[6].Value.Float64(), AssistCPU: s[7].Value.Float64(), TotalCPU: s[8].Value.Float64(),
		MutexWait: s[9].Value.Float64()}
}
