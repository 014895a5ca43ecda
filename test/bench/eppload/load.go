package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/infergate/infergate/internal/chatload"
	"github.com/infergate/infergate/test/bench/proccpu"
	"github.com/infergate/infergate/test/extprocclient"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// config is one run.
type config struct {
	addr, healthAddr, statsAddr string
	pid                         int
	concurrency, conns          int
	duration, warmup            time.Duration
	bodyBytes, chunk, prefixes  int
	endpoints                   int
	kv                          bool
	jsonOut                     string
	serveArgs                   string
	ip                          string
	portBase                    int
	proxyWindow                 int
	kvEvents                    bool
	tokenizer                   string
	tail, waits                 bool
	driver                      string
	perf                        bool
	serveEnv                    string
	gct                         *gcTrace
}

// dial opens one of the driver's connections. With proxyWindow > 0 it
// announces fixed receive windows of that size, as Envoy's HTTP/2 codec
// does (its initial stream and connection windows default to 256 MiB):
// gRPC-Go's own dynamic windows would probe the connection with a ping per
// round trip that a proxy never sends, and the EPP would spend a write
// acknowledging each.
func (c *config) dial() (*grpc.ClientConn, error) {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if c.proxyWindow > 0 {
		w := int32(min(c.proxyWindow, 1<<31-1))
		opts = append(opts, grpc.WithInitialWindowSize(w), grpc.WithInitialConnWindowSize(w))
	}
	cc, err := grpc.NewClient(c.addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", c.addr, err)
	}
	return cc, nil
}

func runCmd(args []string) error {
	c := config{}
	fs := flag.NewFlagSet("eppload", flag.ContinueOnError)
	fs.StringVar(&c.addr, "addr", "", "ext_proc address of a running EPP (empty: start `eppload serve`)")
	fs.StringVar(&c.healthAddr, "health-addr", "", "its gRPC health address (waits for readiness when set)")
	fs.IntVar(&c.pid, "pid", 0, "with -addr: the EPP's process id, for its CPU time")
	fs.IntVar(&c.concurrency, "concurrency", 32, "streams in flight")
	fs.IntVar(&c.conns, "conns", 4, "gRPC connections the streams share (a proxy's workers)")
	fs.DurationVar(&c.duration, "duration", 20*time.Second, "measured window")
	fs.DurationVar(&c.warmup, "warmup", 3*time.Second, "unmeasured load before the window")
	fs.IntVar(&c.bodyBytes, "body-bytes", 8<<10, "request body size")
	fs.IntVar(&c.chunk, "chunk", extprocclient.DefaultChunk, "body slice size")
	fs.IntVar(&c.prefixes, "prefixes", 64, "distinct shared prompt prefixes (each body also has a unique tail)")
	fs.IntVar(&c.endpoints, "endpoints", 16, "started EPP: endpoints in the pool")
	fs.BoolVar(&c.kv, "kv", true, "started EPP: KV-exact mode 3")
	fs.StringVar(&c.serveArgs, "serve-args", "", "started EPP: extra `eppload serve` flags (space-separated, e.g. -cpuprofile cpu.out)")
	fs.StringVar(&c.ip, "ip", "127.0.0.1", "started EPP: its loopback IP (the pool's endpoints take the next 16)")
	fs.IntVar(&c.portBase, "port-base", 0, "started EPP: first of 64 ports it and its pool listen on (0: free ports)")
	fs.BoolVar(&c.kvEvents, "kv-events", true, "started EPP with -kv: fake engines (in this process, so their CPU is not the EPP's) publish KV events holding the workload's prefixes")
	fs.StringVar(&c.tokenizer, "tokenizer", "kvexact/bpe/testdata/qwen3", "tokenizer directory of the started EPP and of the fake engines")
	fs.IntVar(&c.proxyWindow, "proxy-window", 256<<20, "receive window the driver announces per stream and connection, fixed as Envoy's (0: gRPC-Go's dynamic windows and their pings)")
	fs.StringVar(&c.serveEnv, "serve-env", "", "started EPP: extra environment (space-separated, e.g. \"GOGC=200 GOMAXPROCS=1\")")
	fs.BoolVar(&c.tail, "tail", false, "started EPP: relate the slow picks to the EPP's GC cycles (GODEBUG=gctrace=1), run-queue waits (schedstat) and Go scheduler latency")
	fs.BoolVar(&c.waits, "waits", false, "with -concurrency 1: read the EPP's and the driver's threads' run-queue waits (schedstat) around every pick (costs the driver two file reads per thread of both processes a pick: ~190 with the started EPP, whose report prints the thread count)")
	fs.StringVar(&c.driver, "driver", driverGRPC, "grpc: streams over grpc-go clients (extprocclient; -conns connections shared by the streams); lean: one goroutine per stream in flight speaking HTTP/2 frames on its own connection, as an event-driven proxy (-conns ignored)")
	fs.BoolVar(&c.perf, "perf", false, "count the EPP's and the driver's context switches, futex calls, poller waits, reads and writes per pick over the window (perf stat; needs perf and the right to trace the EPP)")
	fs.StringVar(&c.jsonOut, "json", "", "also write the report as JSON here")
	if err := parseAll(fs, args); err != nil {
		return err
	}
	if c.driver != driverGRPC && c.driver != driverLean {
		return fmt.Errorf("-driver %q: want %s or %s", c.driver, driverGRPC, driverLean)
	}
	if c.driver == driverLean {
		c.conns = c.concurrency
	}
	ctx := context.Background()
	if c.addr == "" {
		stop, err := c.startServer()
		if err != nil {
			return err
		}
		defer stop()
	}
	if c.healthAddr != "" {
		if err := waitReady(ctx, c.healthAddr, 30*time.Second); err != nil {
			return err
		}
	}
	rep, err := c.run(ctx)
	if err != nil {
		return err
	}
	rep.print(os.Stdout)
	if c.jsonOut != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		return os.WriteFile(c.jsonOut, b, 0o644)
	}
	return nil
}

// startServer runs `eppload serve` as a child process, so its CPU time is
// the EPP's alone, and stops it with SIGTERM (which writes its profiles).
func (c *config) startServer() (func(), error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	// Free ports by default rather than fixed ones, so two runs (a tree and
	// the one it is compared with) can be measured side by side under the
	// same load; -port-base keeps a run inside a given range.
	plan, err := newNetPlan(c.ip, c.portBase, c.endpoints)
	if err != nil {
		return nil, err
	}
	var addrs [3]string
	for i := range addrs {
		if addrs[i], err = plan.addr(); err != nil {
			return nil, err
		}
	}
	c.addr, c.healthAddr, c.statsAddr = addrs[0], addrs[1], addrs[2]
	// The fake engines publish from this process: a real engine's
	// publishing is not the EPP's work (its subscribing is, and stays).
	var feed *kvFeed
	kvArgs := []string{"-kv-events=" + strconv.FormatBool(c.kvEvents), "-tokenizer", c.tokenizer}
	if c.kv && c.kvEvents {
		zmqPort, err := plan.port()
		if err != nil {
			return nil, err
		}
		if feed, err = startKVFeed(plan, c.endpoints, zmqPort, newWorkload(c.prefixes, c.bodyBytes), c.tokenizer); err != nil {
			return nil, err
		}
		go feed.run()
		kvArgs = append(kvArgs, "-kv-zmq-port", strconv.Itoa(zmqPort))
	}
	args := []string{"serve", "-epp-addr", c.addr, "-epp-health-addr", c.healthAddr, "-stats-addr", c.statsAddr,
		"-ip", c.ip, "-port-base", strconv.Itoa(plan.rest()),
		"-endpoints", strconv.Itoa(c.endpoints), "-kv=" + strconv.FormatBool(c.kv),
		"-prefixes", strconv.Itoa(c.prefixes), "-body-bytes", strconv.Itoa(c.bodyBytes)}
	args = append(append(args, kvArgs...), strings.Fields(c.serveArgs)...)
	closeFeed := func() {
		if feed != nil {
			feed.close()
		}
	}
	cmd := exec.Command(self, args...)
	cmd.Stderr = os.Stderr
	cmd.Env = append(os.Environ(), strings.Fields(c.serveEnv)...)
	if c.tail {
		c.gct = &gcTrace{}
		cmd.Env = append(cmd.Env, "GODEBUG=gctrace=1")
		pr, pw, err := os.Pipe()
		if err != nil {
			closeFeed()
			return nil, err
		}
		cmd.Stderr = pw
		go c.gct.read(pr, os.Stderr)
		defer pw.Close() // the child holds its own copy
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		closeFeed()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		closeFeed()
		return nil, fmt.Errorf("start eppload serve: %w", err)
	}
	c.pid = cmd.Process.Pid
	stop := func() {
		defer closeFeed()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		stop()
		return nil, fmt.Errorf("eppload serve did not start (%q, %v)", line, err)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return stop, nil
}

func waitReady(ctx context.Context, addr string, d time.Duration) error {
	cc, err := extprocclient.Dial(addr)
	if err != nil {
		return err
	}
	defer cc.Close()
	h := healthpb.NewHealthClient(cc)
	deadline := time.Now().Add(d)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		r, err := h.Check(cctx, &healthpb.HealthCheckRequest{Service: "readiness"})
		cancel()
		if err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("EPP at %s not ready within %v (last: %v %v)", addr, d, r.GetStatus(), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// workload builds request bodies: a chat completion whose system prompt is
// one of c.prefixes shared prefixes and whose user turn is unique, padded
// to c.bodyBytes — so the picker's prefix hashing and tokenizer see real
// variety, never one cached body.
type workload struct {
	prefixes []string
	size     int
}

func newWorkload(n, size int) *workload {
	return &workload{prefixes: chatload.SystemPrompts(n, size), size: size}
}

func (w *workload) body(seq uint64) []byte {
	return chatload.Body("sim-8b", w.prefixes[seq%uint64(len(w.prefixes))], seq, w.size)
}

func (w *workload) request(seq uint64, chunk int) extprocclient.Request {
	body := w.body(seq)
	return extprocclient.Request{Chunk: chunk, Body: body, Headers: extprocclient.Headers(
		":method", "POST", ":path", "/v1/chat/completions", ":authority", "gw.example", ":scheme", "http",
		"content-type", "application/json", "content-length", strconv.Itoa(len(body)), "user-agent", "eppload",
		"x-request-id", strconv.FormatUint(seq, 16), "x-forwarded-for", "10.1.2.3",
		"x-gateway-inference-objective", "standard",
	)}
}

// exchange runs one full stream and returns the pick latency.
func exchange(ctx context.Context, cc grpc.ClientConnInterface, r extprocclient.Request) (time.Duration, int, error) {
	start := time.Now()
	x, err := extprocclient.Start(ctx, cc, r)
	if err != nil {
		return 0, 0, err
	}
	p, err := x.Pick()
	lat := time.Since(start)
	if err != nil {
		x.Close()
		return 0, 0, err
	}
	if p.Status != 0 {
		return lat, p.Status, x.Finish()
	}
	if err := checkPick(p); err != nil {
		x.Close()
		return 0, 0, err
	}
	if err := x.Respond(http.StatusOK, p.Endpoints[0], []byte("data: [DONE]\n\n")); err != nil {
		x.Close()
		return 0, 0, err
	}
	return lat, 0, x.Finish()
}

// checkPick is what both drivers check of a pick: a destination, and the
// header and the metadata carrying the same one.
func checkPick(p extprocclient.Pick) error {
	if len(p.Endpoints) == 0 {
		return errors.New("pick without a destination header")
	}
	if p.Metadata != strings.Join(p.Endpoints, ",") {
		return fmt.Errorf("header %v and metadata %q disagree", p.Endpoints, p.Metadata)
	}
	return nil
}

// The drivers (-driver).
const (
	driverGRPC = "grpc"
	driverLean = "lean"
)

// exchanger runs one whole stream on a driver's connection.
type exchanger func(extprocclient.Request) (time.Duration, int, error)

// exchangers opens one exchanger per stream in flight and returns them with
// a function closing their connections.
func (c *config) exchangers(ctx context.Context) ([]exchanger, func(), error) {
	out := make([]exchanger, c.concurrency)
	var closers []func() error
	closeAll := func() {
		for _, f := range closers {
			_ = f()
		}
	}
	if c.driver == driverLean {
		for i := range out {
			l, err := dialLean(c.addr, c.proxyWindow)
			if err != nil {
				closeAll()
				return nil, nil, err
			}
			closers = append(closers, l.close)
			out[i] = l.exchange
		}
		return out, closeAll, nil
	}
	conns := make([]*grpc.ClientConn, c.conns)
	for i := range conns {
		cc, err := c.dial()
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		closers = append(closers, cc.Close)
		conns[i] = cc
	}
	for i := range out {
		cc := conns[i%len(conns)]
		out[i] = func(r extprocclient.Request) (time.Duration, int, error) { return exchange(ctx, cc, r) }
	}
	return out, closeAll, nil
}

// report is one run's figures.
type report struct {
	Picks            int64         `json:"picks"`
	Refused          int64         `json:"refused"`
	Errors           int64         `json:"errors"`
	FirstError       string        `json:"first_error,omitempty"`
	Wall             time.Duration `json:"wall_ns"`
	PicksPerSec      float64       `json:"picks_per_sec"`
	ServerCPU        time.Duration `json:"server_cpu_ns"`
	ClientCPU        time.Duration `json:"client_cpu_ns"`
	CPUPerPick       time.Duration `json:"server_cpu_per_pick_ns"`
	PicksPerCore     float64       `json:"picks_per_server_cpu_second"`
	P50, P90, P99    time.Duration `json:"-"`
	P999, Max        time.Duration `json:"-"`
	Waits            *waitReport   `json:"waits,omitempty"`
	Tail             *tailReport   `json:"tail,omitempty"`
	Percentiles      map[string]float64
	ReadsPerPick     float64            `json:"server_read_syscalls_per_pick,omitempty"`
	WritesPerPick    float64            `json:"server_write_syscalls_per_pick,omitempty"`
	AllocsPerPick    float64            `json:"server_allocs_per_pick,omitempty"`
	BytesPerPick     float64            `json:"server_alloc_bytes_per_pick,omitempty"`
	HeapBefore       uint64             `json:"heap_live_before,omitempty"`
	HeapAfter        uint64             `json:"heap_live_after,omitempty"`
	ClientCPUPerPick time.Duration      `json:"driver_cpu_per_pick_ns"`
	Driver           string             `json:"driver"`
	EPPPerf          map[string]float64 `json:"epp_perf_per_pick,omitempty"`
	DriverPerf       map[string]float64 `json:"driver_perf_per_pick,omitempty"`
	LoadAvg          string             `json:"loadavg"`
	Concurrency      int                `json:"concurrency"`
	Conns            int                `json:"conns"`
	BodyBytes        int                `json:"body_bytes"`
}

func (c *config) run(ctx context.Context) (*report, error) {
	w := newWorkload(c.prefixes, c.bodyBytes)
	exs, closeAll, err := c.exchangers(ctx)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	var (
		seq      atomic.Uint64
		measure  atomic.Bool
		stop     atomic.Bool
		picks    atomic.Int64
		finished atomic.Int64 // every stream that ended, measured or not
		refused  atomic.Int64
		errs     atomic.Int64
		firstErr atomic.Value
		mu       sync.Mutex
		recs     []pickRec
		waits    atomic.Pointer[threadWaits]
		wg       sync.WaitGroup
	)
	for i := range c.concurrency {
		wg.Add(1)
		go func(ex exchanger) {
			defer wg.Done()
			local := make([]pickRec, 0, 1<<14)
			var w0, w1 []int64
			for !stop.Load() {
				n := seq.Add(1)
				req := w.request(n, c.chunk)
				tw := waits.Load()
				if tw != nil {
					if len(w0) != len(tw.files) {
						w0, w1 = make([]int64, len(tw.files)), make([]int64, len(tw.files))
					}
					tw.read(w0)
				}
				t0 := time.Now().UnixNano()
				lat, refusedWith, err := ex(req)
				var wait int64
				if tw != nil {
					tw.read(w1)
					wait = longest(w0, w1)
				}
				finished.Add(1)
				if !measure.Load() {
					continue
				}
				switch {
				case err != nil:
					if errs.Add(1) == 1 {
						firstErr.Store(err.Error())
					}
				case refusedWith != 0:
					refused.Add(1)
				default:
					picks.Add(1)
					local = append(local, pickRec{start: t0, lat: lat, wait: wait})
				}
			}
			mu.Lock()
			recs = append(recs, local...)
			mu.Unlock()
		}(exs[i])
	}
	time.Sleep(c.warmup)
	if c.waits && c.pid > 0 {
		tw, err := openThreadWaits(c.pid, os.Getpid())
		if err != nil {
			return nil, err
		}
		defer tw.close()
		waits.Store(tw)
	}
	before, haveStats := c.stats("?gc=1")
	finished0 := finished.Load()
	rep := &report{LoadAvg: loadavg(), Concurrency: c.concurrency, Conns: c.conns, BodyBytes: c.bodyBytes, Driver: c.driver}
	srv0, _ := proccpu.Of(c.pid)
	io0, io0Err := readProcIO(c.pid)
	cli0 := proccpu.Self()
	wait0, slices0, _ := runDelay(c.pid)
	dwait0, _, _ := runDelay(os.Getpid())
	// perf counts from the streams that ended since it started to those
	// ended when it is stopped: its span, not the window's (it attaches
	// and stops within milliseconds: at worst a stream or two of skew).
	var eppPerf, drvPerf *perfRun
	var perfFrom, perfStreams int64
	if c.perf {
		if eppPerf, err = startPerf(c.pid); err != nil {
			return nil, err
		}
		if drvPerf, err = startPerf(os.Getpid()); err != nil {
			return nil, err
		}
		perfFrom = finished.Load()
	}
	start := time.Now()
	measure.Store(true)
	time.Sleep(c.duration)
	measure.Store(false)
	rep.Wall = time.Since(start)
	end := time.Now()
	wait1, slices1, _ := runDelay(c.pid)
	dwait1, _, _ := runDelay(os.Getpid())
	srv1, srvErr := proccpu.Of(c.pid)
	io1, io1Err := readProcIO(c.pid)
	cli1 := proccpu.Self()
	var eppCounts, drvCounts map[string]float64
	if c.perf {
		perfStreams = finished.Load() - perfFrom
		if eppCounts, err = eppPerf.stop(); err != nil {
			return nil, err
		}
		if drvCounts, err = drvPerf.stop(); err != nil {
			return nil, err
		}
	}
	stop.Store(true)
	wg.Wait()
	after, _ := c.stats("?gc=1&gcs=1")

	rep.Picks, rep.Refused, rep.Errors = picks.Load(), refused.Load(), errs.Load()
	if v, ok := firstErr.Load().(string); ok {
		rep.FirstError = v
	}
	if rep.Picks == 0 {
		return rep, fmt.Errorf("no picks (%d refused, %d errors, first: %s)", rep.Refused, rep.Errors, rep.FirstError)
	}
	rep.PicksPerSec = float64(rep.Picks) / rep.Wall.Seconds()
	if c.pid > 0 && srvErr == nil {
		rep.ServerCPU = srv1 - srv0
		rep.CPUPerPick = rep.ServerCPU / time.Duration(rep.Picks+rep.Refused)
		rep.PicksPerCore = float64(rep.Picks+rep.Refused) / rep.ServerCPU.Seconds()
	}
	if c.pid > 0 && io0Err == nil && io1Err == nil {
		// Read at the window's edges, as the CPU time: the streams in
		// flight at either edge blur it by less than the concurrency.
		n := float64(rep.Picks + rep.Refused)
		rep.ReadsPerPick = float64(io1.reads-io0.reads) / n
		rep.WritesPerPick = float64(io1.writes-io0.writes) / n
	}
	rep.ClientCPU = cli1 - cli0
	rep.ClientCPUPerPick = rep.ClientCPU / time.Duration(rep.Picks+rep.Refused)
	if c.perf {
		rep.EPPPerf, rep.DriverPerf = perPick(eppCounts, perfStreams), perPick(drvCounts, perfStreams)
	}
	if c.tail && haveStats && c.gct != nil {
		t := analyseTail(slices.Clone(recs), c.gct.spans(after.GCs), start.UnixNano(), end.UnixNano())
		n := float64(rep.Picks + rep.Refused)
		t.EPPRunWait = us(wait1-wait0) / n
		t.EPPSlices = float64(slices1-slices0) / n
		t.DriverRunWait = us(dwait1-dwait0) / n
		// The histograms and CPU classes span the forced GCs at the edges
		// too (a few cycles against the window's tens).
		t.SchedP99 = 1e6 * after.SchedLatency.quantile(before.SchedLatency, 0.99)
		t.SchedP999 = 1e6 * after.SchedLatency.quantile(before.SchedLatency, 0.999)
		t.SchedOver1ms = after.SchedLatency.countAbove(before.SchedLatency, 1e-3)
		t.GCPauseP99 = 1e6 * after.GCPauses.quantile(before.GCPauses, 0.99)
		if cpu := after.TotalCPU - before.TotalCPU; cpu > 0 {
			t.GCCPUFraction = (after.GCCPU - before.GCCPU) / cpu
		}
		t.AssistCPUPerPick = 1e6 * (after.AssistCPU - before.AssistCPU) / n
		t.MutexWaitPerPick = 1e6 * (after.MutexWait - before.MutexWait) / n
		rep.Tail = &t
	}
	if tw := waits.Load(); tw != nil {
		wr := analyseWaits(slices.Clone(recs), len(tw.files))
		rep.Waits = &wr
	}
	lats := make([]time.Duration, len(recs))
	for i, r := range recs {
		lats[i] = r.lat
	}
	slices.Sort(lats)
	q := func(f float64) time.Duration { return lats[min(len(lats)-1, int(f*float64(len(lats))))] }
	rep.P50, rep.P90, rep.P99, rep.P999, rep.Max = q(0.5), q(0.9), q(0.99), q(0.999), lats[len(lats)-1]
	rep.Percentiles = map[string]float64{"p50_us": us(rep.P50), "p90_us": us(rep.P90), "p99_us": us(rep.P99), "p999_us": us(rep.P999), "max_us": us(rep.Max)}
	if haveStats {
		// The counters span the drain too: divide by every stream that
		// ended between the two reads (the few in flight at the first
		// read blur it by less than the concurrency).
		n := float64(finished.Load() - finished0)
		rep.AllocsPerPick = float64(after.AllocObjects-before.AllocObjects) / n
		rep.BytesPerPick = float64(after.AllocBytes-before.AllocBytes) / n
		rep.HeapBefore, rep.HeapAfter = before.HeapLive, after.HeapLive
	}
	return rep, nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// stats reads the started EPP's runtime counters (after a forced GC).
func (c *config) stats(query string) (runtimeStats, bool) {
	if c.statsAddr == "" {
		return runtimeStats{}, false
	}
	u := "http://" + c.statsAddr + "/stats" + query
	resp, err := http.Get(u)
	if err != nil {
		return runtimeStats{}, false
	}
	defer resp.Body.Close()
	var s runtimeStats
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return runtimeStats{}, false
	}
	return s, true
}

func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "eppload: %s driver, %d streams in flight over %d connections, %d B bodies, %v window, load average %s\n",
		r.Driver, r.Concurrency, r.Conns, r.BodyBytes, r.Wall.Round(time.Millisecond), r.LoadAvg)
	fmt.Fprintf(w, "  picks %d (refused %d, errors %d)  %.0f picks/s wall\n", r.Picks, r.Refused, r.Errors, r.PicksPerSec)
	if r.FirstError != "" {
		fmt.Fprintf(w, "  first error: %s\n", r.FirstError)
	}
	if r.ServerCPU > 0 {
		fmt.Fprintf(w, "  EPP CPU %.2f s = %.1f µs per pick = %.0f picks/s per core   (driver CPU %.2f s = %.1f µs per pick)\n",
			r.ServerCPU.Seconds(), us(r.CPUPerPick), r.PicksPerCore, r.ClientCPU.Seconds(), us(r.ClientCPUPerPick))
	}
	if r.WritesPerPick > 0 {
		fmt.Fprintf(w, "  EPP system calls per pick: %.2f reads, %.2f writes\n", r.ReadsPerPick, r.WritesPerPick)
	}
	fmt.Fprintf(w, "  pick latency (headers sent → pick received): p50 %v  p90 %v  p99 %v  p99.9 %v  max %v\n",
		r.P50.Round(time.Microsecond), r.P90.Round(time.Microsecond), r.P99.Round(time.Microsecond), r.P999.Round(time.Microsecond), r.Max.Round(time.Microsecond))
	printPerf(w, "EPP", r.EPPPerf)
	printPerf(w, "driver", r.DriverPerf)
	if r.AllocsPerPick > 0 {
		fmt.Fprintf(w, "  EPP allocations %.0f per pick, %.1f KB per pick; live heap after GC %.1f MB → %.1f MB\n",
			r.AllocsPerPick, r.BytesPerPick/1024, float64(r.HeapBefore)/(1<<20), float64(r.HeapAfter)/(1<<20))
	}
	if r.Tail != nil {
		r.Tail.print(w)
	}
	if r.Waits != nil {
		r.Waits.print(w)
	}
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
