package enginestats

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/infergate/infergate/metrics"
)

// countingEngine serves a vLLM exposition whose running gauge is running
// and counts the requests that reach it.
func countingEngine(t *testing.T, running int) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		fmt.Fprintf(w, "vllm:num_requests_running %d\nvllm:num_requests_waiting 1\n", running)
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// scrapesIn is how many requests reach an engine over d.
func scrapesIn(hits *atomic.Int64, d time.Duration) int64 {
	n := hits.Load()
	time.Sleep(d)
	return hits.Load() - n
}

// TestScrapeShared: N rules naming one endpoint cost one scrape per
// interval at the engine; every rule's Cell gets the snapshot and every
// rule exports its own series. Dropping one rule removes only its series
// while the scrape goes on; dropping the last stops it.
func TestScrapeShared(t *testing.T) {
	for _, rules := range []int{1, 2, 50, 500} {
		t.Run(fmt.Sprint(rules, " rules"), func(t *testing.T) {
			srv, hits := countingEngine(t, 7)
			m := metrics.NewEngine(prometheus.NewRegistry())
			opts := fastOptions()
			s := New(opts, m, nil)
			defer s.Close()
			cells := make([]Cell, rules)
			for i := range rules {
				s.Set(fmt.Sprint("owner", i), []Target{{Rule: fmt.Sprint("r", i), Endpoint: "e", URL: srv.URL + "/metrics", Cell: &cells[i]}})
			}
			if n := s.Targets(); n != 1 {
				t.Fatalf("distinct scrapes = %d, want 1", n)
			}
			waitFor(t, "every rule's snapshot", func() bool {
				for i := range cells {
					if !cells[i].Load().Valid(time.Now()) {
						return false
					}
				}
				return true
			})
			for i := range cells {
				if got := cells[i].Load().Sample.Running; got != 7 {
					t.Fatalf("rule %d: running %v, want 7", i, got)
				}
			}
			// From the next good scrape on, every Cell holds the same
			// snapshot: one allocation per scrape, not one per rule.
			waitFor(t, "every rule's cell to share the snapshot", func() bool {
				first := cells[0].Load()
				for i := range cells {
					if cells[i].Load() != first {
						return false
					}
				}
				return true
			})
			// One scrape per interval (jitter ±10 %), never one per rule: a
			// loaded host only makes fewer.
			const window = 200 * time.Millisecond
			limit := int64(2*window/opts.Interval) + 2
			if n := scrapesIn(hits, window); n > limit {
				t.Errorf("%d requests reached the engine in %v, want at most %d (one per %v)", n, window, limit, opts.Interval)
			}
			if c := seriesCount(m.Running); c != rules {
				t.Errorf("running series = %d, want one per rule (%d)", c, rules)
			}

			s.Drop("owner0")
			if c := seriesCount(m.Running); c != rules-1 {
				t.Errorf("after dropping one rule: running series = %d, want %d", c, rules-1)
			}
			if rules > 1 {
				if n := scrapesIn(hits, 100*time.Millisecond); n == 0 {
					t.Error("the shared scrape stopped with rules still naming it")
				}
				if s.Targets() != 1 {
					t.Errorf("distinct scrapes = %d, want 1", s.Targets())
				}
				at := cells[1].Load().At
				waitFor(t, "a later snapshot for a remaining rule", func() bool { return cells[1].Load().At.After(at) })
			}
			for i := 1; i < rules; i++ {
				s.Drop(fmt.Sprint("owner", i))
			}
			if s.Targets() != 0 || seriesCount(m.Running) != 0 {
				t.Fatalf("after dropping every rule: %d scrapes, %d series", s.Targets(), seriesCount(m.Running))
			}
			time.Sleep(20 * time.Millisecond) // a scrape in flight when the last rule left
			if n := scrapesIn(hits, 100*time.Millisecond); n != 0 {
				t.Errorf("%d requests after the last rule left", n)
			}
			if c := seriesCount(m.Scrapes) + seriesCount(m.Running); c != 0 {
				t.Errorf("%d series came back after every rule left", c)
			}
		})
	}
}

// TestScrapeSharedMoves: a rule whose URL, engine or client changes moves
// to the scrape of its new key, keeps its series, and leaves the others on
// the old one.
func TestScrapeSharedMoves(t *testing.T) {
	a, aHits := countingEngine(t, 3)
	b, bHits := countingEngine(t, 9)
	tests := []struct {
		name   string
		change func(*Target)
		scrape int64 // the running gauge the moved rule then sees
	}{
		{"url", func(t *Target) { t.URL = b.URL + "/metrics" }, 9},
		{"engine", func(t *Target) { t.Engine = EngineSGLang }, 3},
		{"client", func(t *Target) { t.Client = &http.Client{} }, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := metrics.NewEngine(prometheus.NewRegistry())
			s := New(fastOptions(), m, nil)
			defer s.Close()
			var cells [3]Cell
			target := func(i int) Target {
				return Target{Rule: fmt.Sprint("r", i), Endpoint: "e", URL: a.URL + "/metrics", Engine: EngineVLLM, Cell: &cells[i]}
			}
			for i := range cells {
				s.Set(fmt.Sprint("owner", i), []Target{target(i)})
			}
			waitFor(t, "the shared snapshot", func() bool { return cells[2].Load().Valid(time.Now()) })
			moved := target(0)
			tt.change(&moved)
			s.Set("owner0", []Target{moved})
			if n := s.Targets(); n != 2 {
				t.Fatalf("distinct scrapes after the move = %d, want 2", n)
			}
			before := cells[0].Load().Tried
			waitFor(t, "the moved rule's next snapshot", func() bool { return cells[0].Load().Tried.After(before) })
			if tt.name == "engine" {
				// sglang's families are not in the body: no signal, and the
				// snapshot says which dialect was asked.
				waitFor(t, "the sglang scrape's reason", func() bool { return cells[0].Load().Reason == ReasonNoSignal })
				if cells[0].Load().Engine != EngineSGLang {
					t.Errorf("moved snapshot %+v", cells[0].Load())
				}
			} else {
				waitFor(t, fmt.Sprint("the moved rule to see running ", tt.scrape), func() bool {
					return int64(cells[0].Load().Sample.Running) == tt.scrape && cells[0].Load().Reason == ReasonOK
				})
			}
			if tt.name == "url" {
				if n := scrapesIn(bHits, 50*time.Millisecond); n == 0 {
					t.Error("the new URL is not scraped")
				}
			}
			if n := scrapesIn(aHits, 50*time.Millisecond); n == 0 {
				t.Error("the old scrape stopped though two rules still name it")
			}
			if cells[1].Load().Sample.Running != 3 {
				t.Errorf("a rule that stayed: %+v", cells[1].Load())
			}
			if c := seriesCount(m.Scrapes); c < 3 {
				t.Errorf("scrape counter series = %d, want every rule's", c)
			}
			s.Set("owner0", []Target{target(0)}) // back: one scrape again
			if n := s.Targets(); n != 1 {
				t.Errorf("distinct scrapes after moving back = %d, want 1", n)
			}
		})
	}
}

// TestScrapeSharedRelabel: a target whose rule label changes on the same
// scrape loses the old label's series and exports under the new one.
func TestScrapeSharedRelabel(t *testing.T) {
	srv, _ := countingEngine(t, 4)
	m := metrics.NewEngine(prometheus.NewRegistry())
	s := New(fastOptions(), m, nil)
	defer s.Close()
	var a, b Cell
	s.Set("owner-a", []Target{{Rule: "a", Endpoint: "e", URL: srv.URL, Cell: &a}})
	s.Set("owner-b", []Target{{Rule: "b", Endpoint: "e", URL: srv.URL, Cell: &b}})
	waitFor(t, "both rules' series", func() bool { return seriesCount(m.Running) == 2 })
	s.Set("owner-a", []Target{{Rule: "a2", Endpoint: "e", URL: srv.URL, Cell: &a}})
	waitFor(t, "the new label's series", func() bool { return value(m.Running.WithLabelValues("a2", "e")) == 4 })
	time.Sleep(30 * time.Millisecond) // scrapes after the relabel
	if c := seriesCount(m.Running); c != 2 {
		t.Errorf("running series = %d, want 2 (b and a2; a forgotten)", c)
	}
	if s.Targets() != 1 {
		t.Errorf("distinct scrapes = %d, want 1", s.Targets())
	}
}

// TestScrapeSharedChurn: owners joining, moving, relabelling and leaving
// shared scrapes from many goroutines while they run (for -race); at the
// end no scrape and no series is left.
func TestScrapeSharedChurn(t *testing.T) {
	a, _ := countingEngine(t, 1)
	b, _ := countingEngine(t, 2)
	m := metrics.NewEngine(prometheus.NewRegistry())
	s := New(Options{Interval: time.Millisecond, Timeout: 100 * time.Millisecond}, m, nil)
	defer s.Close()
	urls := []string{a.URL, b.URL}
	done := make(chan struct{})
	for g := range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			owner := fmt.Sprint("owner", g)
			var cell Cell
			for i := range 200 {
				switch i % 4 {
				case 3:
					s.Drop(owner)
				default:
					s.Set(owner, []Target{{Rule: fmt.Sprint("r", g, "-", i%3), Endpoint: "e", URL: urls[(i/2)%2], Cell: &cell}})
				}
				if i%20 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
			s.Drop(owner)
		}()
	}
	for range 8 {
		<-done
	}
	if n := s.Targets(); n != 0 {
		t.Fatalf("distinct scrapes after every owner left = %d", n)
	}
	time.Sleep(20 * time.Millisecond)
	if c := seriesCount(m.Scrapes) + seriesCount(m.Running); c != 0 {
		t.Errorf("%d series left after every owner left", c)
	}
}
