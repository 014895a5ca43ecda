package enginestats

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/infergate/infergate/metrics"
)

// fastOptions scrape often so tests finish quickly.
func fastOptions() Options {
	return Options{Interval: 10 * time.Millisecond, Timeout: 100 * time.Millisecond, Jitter: 0.1, MaxBytes: 64 << 10, StaleAfter: 300 * time.Millisecond}
}

// waitFor polls cond until it holds or the test times out.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestScrapeEngines serves each engine's exposition from a real loopback
// server at the engine's default path and checks the snapshot and the
// re-exported gauges.
func TestScrapeEngines(t *testing.T) {
	tests := []struct {
		engine, file     string
		waiting, running int
		kv               float64
	}{
		{EngineVLLM, "vllm-0.10.txt", 5, 16, 0.83},
		{EngineVLLM, "vllm-0.6.txt", 3, 14, 0.4375},
		{EngineSGLang, "sglang-0.5.txt", 17, 11, 0.97},
		{EngineTRTLLM, "trtllm-1.2.txt", 6, 32, 0.5546875},
		{EngineLlamaCpp, "llamacpp.txt", 1, 2, 0.125},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			body := fixture(t, tt.file)
			path := DialectFor(tt.engine).Path
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != path {
					http.NotFound(w, r)
					return
				}
				if r.Header.Get("Accept-Encoding") != "" {
					t.Errorf("scrape asked for a compressed body: %q", r.Header.Get("Accept-Encoding"))
				}
				w.Header().Set("Content-Type", "text/plain; version=0.0.4")
				_, _ = w.Write(body)
			}))
			defer srv.Close()
			m := metrics.NewEngine(prometheus.NewRegistry())
			s := New(fastOptions(), m, nil)
			defer s.Close()
			var cell Cell
			s.Set("rule", []Target{{Rule: "r", Endpoint: "e1", URL: srv.URL + path, Engine: tt.engine, Cell: &cell}})
			waitFor(t, "a good scrape", func() bool { return cell.Load().Valid(time.Now()) })
			snap := cell.Load()
			if int(snap.Sample.Waiting) != tt.waiting || int(snap.Sample.Running) != tt.running || snap.Sample.KVUsage != tt.kv || snap.Reason != ReasonOK {
				t.Errorf("snapshot %+v", snap)
			}
			if got := value(m.Waiting.WithLabelValues("r", "e1")); int(got) != tt.waiting {
				t.Errorf("waiting gauge = %v", got)
			}
			if got := value(m.KVUsage.WithLabelValues("r", "e1")); got != tt.kv {
				t.Errorf("kv gauge = %v", got)
			}
		})
	}
}

// TestScrapeBadInput: every bad answer is ignored with its reason (on the
// snapshot and in the counter), the last good values are kept but age out,
// and nothing blocks or panics.
func TestScrapeBadInput(t *testing.T) {
	good := fixture(t, "vllm-0.10.txt")
	huge := []byte(strings.Repeat("python_gc_objects_collected_total{generation=\"0\"} 1\n", 4000)) // ~200 KiB > 64 KiB
	tests := []struct {
		name    string
		handler http.HandlerFunc
		want    string
	}{
		{"garbage", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("<html>oops</html>")) }, ReasonParse},
		{"json drain", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`[{"numQueuedRequests":1}]`)) }, ReasonParse},
		{"huge", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(huge) }, ReasonTooLarge},
		{"huge declared", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Length", "99999999")
			_, _ = w.Write(huge)
		}, ReasonTooLarge},
		{"nan gauge", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte("vllm:num_requests_waiting NaN\nvllm:num_requests_running 1\n"))
		}, ReasonInvalid},
		{"negative gauge", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("vllm:num_requests_running -4\n")) }, ReasonInvalid},
		{"404", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) }, ReasonStatus},
		{"exports nothing", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("process_cpu_seconds_total 3\n")) }, ReasonNoSignal},
		{"slow headers", func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-time.After(2 * time.Second):
			case <-r.Context().Done():
			}
		}, ReasonTimeout},
		{"slow body", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "1000")
			_, _ = w.Write([]byte("vllm:num_requests_running 1\n"))
			w.(http.Flusher).Flush()
			select {
			case <-time.After(2 * time.Second):
			case <-r.Context().Done():
			}
		}, ReasonTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var bad atomic.Bool
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if bad.Load() {
					tt.handler(w, r)
					return
				}
				_, _ = w.Write(good)
			}))
			defer srv.Close()
			m := metrics.NewEngine(prometheus.NewRegistry())
			s := New(fastOptions(), m, nil)
			defer s.Close()
			var cell Cell
			s.Set("rule", []Target{{Rule: "r", Endpoint: "e1", URL: srv.URL + "/metrics", Cell: &cell}})
			waitFor(t, "a good scrape", func() bool { return cell.Load().Valid(time.Now()) })
			bad.Store(true)
			waitFor(t, "the bad scrape's reason "+tt.want, func() bool { return cell.Load().Reason == tt.want })
			snap := cell.Load()
			if snap.Sample.Running != 16 {
				t.Errorf("last good values lost: %+v", snap.Sample)
			}
			waitFor(t, "the signal to go stale", func() bool { return !cell.Load().Valid(time.Now()) })
			if n := value(m.Scrapes.WithLabelValues("r", "e1", tt.want)); n < 1 {
				t.Errorf("scrapes_total{result=%q} = %v", tt.want, n)
			}
		})
	}
}

// TestScrapeHangingPort: a port that accepts and never answers (or never
// accepts) times out; Close returns promptly.
func TestScrapeHangingPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // hold it open, say nothing
		}
	}()
	s := New(fastOptions(), metrics.NewEngine(prometheus.NewRegistry()), nil)
	var cell Cell
	s.Set("rule", []Target{{Rule: "r", Endpoint: "e1", URL: "http://" + ln.Addr().String() + "/metrics", Cell: &cell}})
	waitFor(t, "a timeout", func() bool { return cell.Load() != nil && cell.Load().Reason == ReasonTimeout })
	if cell.Load().Valid(time.Now()) {
		t.Error("a hanging port gave a valid signal")
	}
	start := time.Now()
	s.Close()
	if d := time.Since(start); d > time.Second {
		t.Errorf("Close took %v", d)
	}
}

// TestScrapeCounterReset: a counter going backwards (engine restart) is
// reported and the restart counted; the gauges of that scrape are taken.
func TestScrapeCounterReset(t *testing.T) {
	var completed atomic.Int64
	completed.Store(100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "vllm:num_requests_running 2\nvllm:num_requests_waiting %d\nvllm:request_success_total{finished_reason=\"stop\"} %d\n", completed.Load()%7, completed.Load())
	}))
	defer srv.Close()
	m := metrics.NewEngine(prometheus.NewRegistry())
	s := New(fastOptions(), m, nil)
	defer s.Close()
	var cell Cell
	s.Set("rule", []Target{{Rule: "r", Endpoint: "e1", URL: srv.URL, Cell: &cell}})
	waitFor(t, "a good scrape", func() bool { return cell.Load().Valid(time.Now()) })
	completed.Store(3) // restarted
	waitFor(t, "the reset", func() bool { return cell.Load().Restarts == 1 })
	waitFor(t, "scrapes after the reset to be ok", func() bool { return cell.Load().Reason == ReasonOK })
	snap := cell.Load()
	if !snap.Valid(time.Now()) || snap.Sample.Waiting != 3 {
		t.Errorf("after restart: %+v", snap)
	}
	if n := value(m.Scrapes.WithLabelValues("r", "e1", ReasonCounterReset)); n != 1 {
		t.Errorf("counter_reset scrapes = %v, want 1", n)
	}
}

// TestScraperFollowsTargets: Set adds, keeps and removes targets; Drop and
// Close stop their goroutines and series.
func TestScraperFollowsTargets(t *testing.T) {
	var hits [3]atomic.Int64
	var srvs [3]*httptest.Server
	for i := range srvs {
		srvs[i] = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			hits[i].Add(1)
			fmt.Fprintf(w, "vllm:num_requests_running %d\n", i)
		}))
		defer srvs[i].Close()
	}
	before := runtime.NumGoroutine()
	reg := prometheus.NewRegistry()
	m := metrics.NewEngine(reg)
	s := New(fastOptions(), m, nil)
	var cells [3]Cell
	target := func(i int) Target {
		return Target{Rule: "r", Endpoint: fmt.Sprint("e", i), URL: srvs[i].URL, Cell: &cells[i]}
	}
	s.Set("a", []Target{target(0), target(1)})
	waitFor(t, "both scraped", func() bool { return cells[0].Load() != nil && cells[1].Load() != nil })
	kept := cells[0].Load()
	s.Set("a", []Target{target(0), target(2)}) // e1 leaves, e2 joins, e0 stays
	if s.Targets() != 2 {
		t.Fatalf("targets = %d, want 2", s.Targets())
	}
	waitFor(t, "e2 scraped", func() bool { return cells[2].Load() != nil })
	if cells[0].Load().At.Before(kept.At) {
		t.Error("a kept target lost its snapshot")
	}
	n1 := hits[1].Load()
	time.Sleep(50 * time.Millisecond)
	if hits[1].Load() > n1+1 { // at most one scrape was in flight when it left
		t.Errorf("a removed target is still scraped (%d → %d)", n1, hits[1].Load())
	}
	if c := seriesCount(m.Running); c != 2 {
		t.Errorf("running series = %d, want 2 (the removed endpoint's dropped)", c)
	}
	s.Drop("a")
	if s.Targets() != 0 {
		t.Fatalf("targets after Drop = %d", s.Targets())
	}
	s.Close()
	s.Set("a", []Target{target(0)}) // after Close: ignored
	if s.Targets() != 0 {
		t.Error("Set after Close started a target")
	}
	waitFor(t, "goroutines to end", func() bool { return runtime.NumGoroutine() <= before+2 })
}

// TestScrapeOff: a negative interval scrapes nothing.
func TestScrapeOff(t *testing.T) {
	s := New(Options{Interval: -1}, nil, nil)
	defer s.Close()
	var cell Cell
	s.Set("a", []Target{{Endpoint: "e", URL: "http://127.0.0.1:1/metrics", Cell: &cell}})
	if s.Targets() != 0 || cell.Load() != nil {
		t.Error("scraping is off but a target started")
	}
}

// value reads a gauge's or counter's current value.
func value(c prometheus.Metric) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	if m.Gauge != nil {
		return m.Gauge.GetValue()
	}
	return m.Counter.GetValue()
}

// seriesCount is the number of series a collector holds.
func seriesCount(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric, 64)
	go func() { c.Collect(ch); close(ch) }()
	n := 0
	for range ch {
		n++
	}
	return n
}

// TestScrapeKeepsConnection: chunked and Content-Length bodies both leave
// the connection reusable, so scrapes do not dial each time.
func TestScrapeKeepsConnection(t *testing.T) {
	for _, name := range []string{"vllm-0.10.txt" /* > 2 KiB: chunked */, "llamacpp.txt" /* small: Content-Length */} {
		t.Run(name, func(t *testing.T) {
			body := fixture(t, name)
			var conns, hits atomic.Int64
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				hits.Add(1)
				_, _ = w.Write(body)
			}))
			srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					conns.Add(1)
				}
			}
			srv.Start()
			defer srv.Close()
			s := New(fastOptions(), nil, nil)
			defer s.Close()
			var cell Cell
			engine := EngineVLLM
			if name == "llamacpp.txt" {
				engine = EngineLlamaCpp
			}
			s.Set("rule", []Target{{Rule: "r", Endpoint: "e1", URL: srv.URL + "/metrics", Engine: engine, Cell: &cell}})
			waitFor(t, "ten scrapes", func() bool { return hits.Load() >= 10 })
			if c := conns.Load(); c != 1 {
				t.Errorf("%d connections for %d scrapes, want 1", c, hits.Load())
			}
			if snap := cell.Load(); snap.Reason != ReasonOK {
				t.Errorf("snapshot %+v", snap)
			}
		})
	}
}

// TestScrapeTLS: a target with its own client (an engine behind TLS) is
// scraped through net/http with that client's trust.
func TestScrapeTLS(t *testing.T) {
	body := fixture(t, "sglang-0.5.txt")
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(body) }))
	defer srv.Close()
	s := New(fastOptions(), nil, nil)
	defer s.Close()
	var trusted, untrusted Cell
	s.Set("rule", []Target{
		{Rule: "r", Endpoint: "ok", URL: srv.URL + "/metrics", Engine: EngineSGLang, Client: srv.Client(), Cell: &trusted},
		{Rule: "r", Endpoint: "bad", URL: srv.URL + "/metrics", Engine: EngineSGLang, Client: &http.Client{}, Cell: &untrusted},
	})
	waitFor(t, "the trusted scrape", func() bool { return trusted.Load().Valid(time.Now()) })
	if trusted.Load().Sample.Waiting != 17 {
		t.Errorf("snapshot %+v", trusted.Load())
	}
	waitFor(t, "the untrusted scrape to fail", func() bool { return untrusted.Load() != nil && untrusted.Load().Reason == ReasonConnect })
}

// TestSnapshotsStayPut: a published snapshot keeps its values while the
// worker publishes many more (they come from shared slabs).
func TestSnapshotsStayPut(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n := hits.Add(1)
		fmt.Fprintf(w, "vllm:num_requests_waiting %d\nvllm:num_requests_running 1\n", n)
	}))
	defer srv.Close()
	s := New(fastOptions(), nil, nil)
	defer s.Close()
	var cell Cell
	s.Set("rule", []Target{{Rule: "r", Endpoint: "e1", URL: srv.URL + "/metrics", Cell: &cell}})
	waitFor(t, "a good scrape", func() bool { return cell.Load() != nil && cell.Load().Reason == ReasonOK })
	first := cell.Load()
	kept := *first
	start := hits.Load()
	waitFor(t, "three slabs of scrapes", func() bool { return hits.Load() >= start+3*snapshotSlab })
	if *first != kept {
		t.Errorf("a published snapshot changed: %+v, was %+v", *first, kept)
	}
	if last := cell.Load(); last == first || last.Sample.Waiting <= kept.Sample.Waiting {
		t.Errorf("no newer snapshot: %+v after %+v", last, kept)
	}
}
