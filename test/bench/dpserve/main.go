// Command dpserve serves one single-pool rule with the infergate datapath,
// without the management API, so the proxy benchmark measures the request
// path alone.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/infergate/infergate/datapath"
	"github.com/infergate/infergate/spec"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18001", "VIP:port of the rule")
	engine := flag.String("engine", "127.0.0.1:18000", "engine ip:port, comma-separated for a pool")
	sel := flag.Int("sel", 0, "selector (0 rr, 1 hash, 2 wrr, 3 persist, 4 lc)")
	cb := flag.Bool("cb", false, "enable the circuit breaker")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile here until exit")
	memprofile := flag.String("memprofile", "", "write an allocation profile here at exit")
	heapAfter := flag.Duration("heap-after", 0, "with -heapprofile: when to write it (e.g. while streams are open)")
	heapprofile := flag.String("heapprofile", "", "write a heap profile and memory classes here after -heap-after")
	memRate := flag.Int("mem-profile-rate", 0, "runtime.MemProfileRate (1: every allocation, for an exact heap profile of open streams; 0: the runtime's default)")
	accessLog := flag.Bool("access-log", true, "write the access log (to nowhere: its cost only); `infergate serve --log-level warn`, as proxy.sh runs it, writes none")
	flag.Parse()
	if *memRate > 0 {
		runtime.MemProfileRate = *memRate
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fail(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fail(err)
		}
		defer pprof.StopCPUProfile()
	}
	vip, err := netip.ParseAddrPort(*listen)
	if err != nil {
		fail(err)
	}
	var eps []spec.Endpoint
	for _, a := range strings.Split(*engine, ",") {
		ep, err := netip.ParseAddrPort(strings.TrimSpace(a))
		if err != nil {
			fail(err)
		}
		eps = append(eps, spec.Endpoint{ID: ep.String(), Addr: ep, Weight: 1})
	}
	r := &spec.Rule{
		Key:            spec.Key{VIP: vip.Addr(), Port: vip.Port(), Protocol: "tcp"},
		Name:           "bench",
		Generation:     1,
		Selector:       spec.Selector(*sel),
		CircuitBreaker: *cb,
		Probe:          spec.Probe{Type: "none"},
		IdleTimeout:    20 * time.Second,
		Endpoints:      eps,
	}
	opts := datapath.DefaultOptions()
	opts.AccessLog.Enabled = *accessLog
	opts.Upstream.MaxConnsPerEndpoint = 0 // as proxy.sh runs infergate: nginx has no such cap
	opts.Admission.MaxConnsPerIP = 0
	rt := datapath.New(opts, nil, nil)
	if err := rt.Install(nil, r); err != nil {
		fail(err)
	}
	fmt.Println("dpserve listening on", vip)
	if *heapprofile != "" {
		time.AfterFunc(*heapAfter, func() { writeHeap(*heapprofile) })
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = rt.Close(cctx)
	if *memprofile != "" {
		f, err := os.Create(*memprofile)
		if err != nil {
			fail(err)
		}
		if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
			fail(err)
		}
		_ = f.Close()
	}
}

// writeHeap writes a heap profile to path and the runtime's memory classes
// (heap, stacks, ...) to path.txt: what an open stream costs, by kind.
func writeHeap(path string) {
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		fail(err)
	}
	_ = pprof.Lookup("heap").WriteTo(f, 0)
	_ = f.Close()
	if g, err := os.Create(path + ".goroutines"); err == nil {
		_ = pprof.Lookup("goroutine").WriteTo(g, 1)
		_ = g.Close()
	}
	var out strings.Builder
	fmt.Fprintf(&out, "goroutines %d\n", runtime.NumGoroutine())
	for _, d := range metrics.All() {
		if strings.HasPrefix(d.Name, "/memory/classes/") {
			s := []metrics.Sample{{Name: d.Name}}
			metrics.Read(s)
			fmt.Fprintf(&out, "%s %d\n", d.Name, s[0].Value.Uint64())
		}
	}
	_ = os.WriteFile(path+".txt", []byte(out.String()), 0o644)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "dpserve:", err)
	os.Exit(1)
}
