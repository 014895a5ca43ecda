package enginestats

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/infergate/infergate/metrics"
)

// Environment of the cost measurement.
const (
	costEnv       = "ENGINESTATS_COST"        // set: run TestScrapeCost
	costServerEnv = "ENGINESTATS_COST_SERVER" // set in the child serving the expositions
	costEndpoints = 64
	// costNoFilterEnv set: the child ignores name[] and sends the whole
	// exposition every time (an engine without prometheus_client).
	costNoFilterEnv = "ENGINESTATS_COST_NO_FILTER"
)

// TestScrapeCost measures the scraper's own CPU for 64 endpoints at the
// default interval: the engines run in a child process (their cost is not
// ours), each serving a two-engine vLLM exposition of ~60 KiB. The figure
// is this process's user+system CPU over the run (getrusage RUSAGE_SELF:
// every thread of this process, not the child's), in % of one core: the
// scheduler, parse and publish, the Go runtime's wake-ups and the kernel's
// work in this process's system calls. On loopback a write also runs the
// receiving side's TCP input in the writer's system call, so this process
// pays the engines' receipt of its requests and the child pays this
// process's receipt of their answers; over a network the gateway pays the
// receipt of the answers instead, a comparable amount. The scrapes are
// counted, not assumed (a late timer on a busy host scrapes less often
// than every 250 ms): the figure is also given at the nominal rate, CPU
// per scrape times 64 scrapes per 250 ms, and that is the one to hold
// against the target.
//
//	ENGINESTATS_COST=1 go test -run TestScrapeCost -v ./enginestats/
func TestScrapeCost(t *testing.T) {
	if os.Getenv(costEnv) == "" {
		t.Skip("set " + costEnv + "=1 to measure the scrape cost")
	}
	urls := costServers(t)
	reg := prometheus.NewRegistry()
	m := metrics.NewEngine(reg)
	s := New(DefaultOptions(), m, nil)
	cells := make([]Cell, costEndpoints)
	ts := make([]Target, costEndpoints)
	for i := range ts {
		ts[i] = Target{Rule: "cost", Endpoint: fmt.Sprint("e", i), URL: urls[i], Cell: &cells[i]}
	}
	s.Set("cost", ts)
	time.Sleep(time.Second) // connections up, buffers grown
	const window = 10 * time.Second
	var ms0, ms1 runtime.MemStats
	r0 := scrapeResults(t, reg)
	runtime.ReadMemStats(&ms0)
	n0, cpu0, wall0 := scrapeCount(t, m), cpuTime(t), time.Now()
	time.Sleep(window)
	cpu, wall, done := cpuTime(t)-cpu0, time.Since(wall0), scrapeCount(t, m)-n0
	runtime.ReadMemStats(&ms1)
	r1 := scrapeResults(t, reg)
	s.Close()
	for i := range cells {
		if snap := cells[i].Load(); snap == nil || snap.Reason != ReasonOK {
			t.Fatalf("endpoint %d: %+v", i, snap)
		}
	}
	pct := 100 * cpu.Seconds() / wall.Seconds()
	scrapes := float64(costEndpoints) * wall.Seconds() / DefaultInterval.Seconds() // nominal
	if done == 0 {
		t.Fatal("no scrape in the window")
	}
	perScrape := cpu.Seconds() / float64(done)
	for result, n := range r1 {
		if result != ReasonOK && n > r0[result] {
			t.Logf("%.0f scrapes in the window not taken: %s", n-r0[result], result)
		}
	}
	t.Logf("scraper CPU: %.2f %% of one core at the nominal rate (%.2f %% measured, %d scrapes: %.0f %% of the nominal %d endpoints every %v); %.0f µs per scrape; %.1f allocations, %.0f bytes per scrape",
		100*perScrape*costEndpoints/DefaultInterval.Seconds(), pct, done, 100*float64(done)/scrapes,
		costEndpoints, DefaultInterval, perScrape*1e6,
		float64(ms1.Mallocs-ms0.Mallocs)/float64(done), float64(ms1.TotalAlloc-ms0.TotalAlloc)/float64(done))

	// The floor on this machine: the same number of bare keep-alive GETs
	// (net/http client, body discarded) from one goroutine, same servers.
	c := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	n := int(scrapes)
	cpu0 = cpuTime(t)
	for i := range n {
		resp, err := c.Get(urls[i%costEndpoints])
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	floor := cpuTime(t) - cpu0
	t.Logf("for scale, a hot loop of bare keep-alive GETs (net/http, body discarded) on this host: %.0f µs CPU per request (%d requests)",
		floor.Seconds()*1e6/float64(n), n)
}

// costServers starts TestScrapeCostServer in a child process (the
// engines' CPU is not the scraper's) and returns its endpoints' URLs; the
// child ends with the test.
func costServers(t *testing.T) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestScrapeCostServer$")
	cmd.Env = append(os.Environ(), costServerEnv+"=1")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	sc := bufio.NewScanner(stdout)
	var urls []string
	for len(urls) < costEndpoints && sc.Scan() {
		if u, ok := strings.CutPrefix(sc.Text(), "ADDR "); ok {
			urls = append(urls, "http://"+u+"/metrics")
		}
	}
	if len(urls) != costEndpoints {
		t.Fatalf("child served %d endpoints", len(urls))
	}
	return urls
}

// TestScrapeCostServer is the child of TestScrapeCost: 64 listeners, each
// serving the exposition, until stdin closes.
func TestScrapeCostServer(t *testing.T) {
	if os.Getenv(costServerEnv) == "" {
		t.Skip("child process of TestScrapeCost")
	}
	body := bigVLLM()
	// Like prometheus_client, answer a name[] query with those samples
	// only, unless told to ignore it (as llama.cpp does).
	var filtered []byte
	want := map[string]bool{}
	for _, f := range DialectFor(EngineVLLM).Families {
		want[f.Name] = true
	}
	for _, line := range strings.SplitAfter(string(body), "\n") {
		if name, _, ok := strings.Cut(line, "{"); ok && want[name] {
			filtered = append(filtered, line...)
		}
	}
	honour := os.Getenv(costNoFilterEnv) == ""
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		if honour && r.URL.Query().Has("name[]") {
			_, _ = w.Write(filtered)
			return
		}
		_, _ = w.Write(body)
	})
	for range costEndpoints {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = http.Serve(ln, h) }()
		fmt.Println("ADDR " + ln.Addr().String())
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// scrapeCount is the number of scrapes published so far (every scrape,
// good or not, observes its duration once).
func scrapeCount(t *testing.T, m *metrics.Engine) uint64 {
	var d dto.Metric
	if err := m.Duration.Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetHistogram().GetSampleCount()
}

// scrapeResults sums infergate_engine_scrapes_total by result.
func scrapeResults(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "infergate_engine_scrapes_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" {
					by[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return by
}

func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestScrapeCostShared measures the scraper's CPU for costRules rules
// naming one endpoint, in two arms of one run: every rule on its own URL
// (a path per rule: one scrape per rule and interval, which is what the
// scraper did for rules sharing an endpoint before scrapes were shared)
// and every rule on the same URL (one shared scrape).
//
//	ENGINESTATS_COST=1 go test -run 'TestScrapeCostShared$' -v ./enginestats/
func TestScrapeCostShared(t *testing.T) {
	if os.Getenv(costEnv) == "" {
		t.Skip("set " + costEnv + "=1 to measure the scrape cost")
	}
	const costRules = 2000
	url := costServers(t)[0]
	arms := []struct {
		name string
		url  func(i int) string
	}{
		{"a scrape per rule", func(i int) string { return fmt.Sprint(url, "/", i) }},
		{"one shared scrape", func(int) string { return url }},
	}
	for _, arm := range arms {
		s := New(DefaultOptions(), metrics.NewEngine(prometheus.NewRegistry()), nil)
		cells := make([]Cell, costRules)
		for i := range cells {
			s.Set(fmt.Sprint("rule", i), []Target{{Rule: fmt.Sprint("rule", i), Endpoint: "e", URL: arm.url(i), Cell: &cells[i]}})
		}
		time.Sleep(2 * time.Second) // connections up, buffers grown
		const window = 5 * time.Second
		cpu0, wall0 := cpuTime(t), time.Now()
		time.Sleep(window)
		cpu, wall := cpuTime(t)-cpu0, time.Since(wall0)
		scrapes := s.Targets()
		s.Close()
		for i := range cells {
			if snap := cells[i].Load(); snap == nil || snap.Reason != ReasonOK {
				t.Fatalf("%s: rule %d: %+v", arm.name, i, snap)
			}
		}
		t.Logf("%s: %d rules on one endpoint, %d distinct scrapes: scraper CPU %.2f %% of one core at %v",
			arm.name, costRules, scrapes, 100*cpu.Seconds()/wall.Seconds(), DefaultInterval)
	}
}
