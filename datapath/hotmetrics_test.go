package datapath

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/infergate/infergate/datapath/chwbl"
	"github.com/infergate/infergate/datapath/pd"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/spec"
	"github.com/prometheus/client_golang/prometheus"
)

// TestCountPickSeries: the cached children count into exactly the series
// WithLabelValues names, appear only once used, and a removed rule's
// series go away as before.
func TestCountPickSeries(t *testing.T) {
	rx := metrics.NewRadix(prometheus.NewRegistry())
	c := &compiled{label: "r1", rx: rx}
	if n := metricValue(t, rx.CHWBLPicks); n != 0 {
		t.Fatalf("picks before use = %v", n)
	}
	for range 3 {
		c.countPick(chwbl.SourcePrefix, 0)
	}
	c.countPick(chwbl.SourceSession, 2)
	c.countPick(chwbl.Source(200), 0) // unknown source: uncached path, same vector
	for _, tc := range []struct {
		src  string
		want float64
	}{{"prefix", 3}, {"session", 1}, {"unknown", 1}, {"round_robin", 0}} {
		if got := metricValue(t, rx.CHWBLPicks.WithLabelValues("r1", tc.src)); got != tc.want {
			t.Errorf("picks{source=%s} = %v, want %v", tc.src, got, tc.want)
		}
	}
	if got := metricValue(t, rx.CHWBLBoundSkips); got != 2 {
		t.Errorf("bound skips = %v, want 2", got)
	}
	rx.ForgetRule("r1")
	if got := metricValue(t, rx.CHWBLPicks); got != 0 {
		t.Errorf("picks after Forget = %v", got)
	}
}

// BenchmarkCountPick is one CHWBL pick's metrics: cached child vs the
// WithLabelValues lookup it replaced (report the ratio).
func BenchmarkCountPick(b *testing.B) {
	rx := metrics.NewRadix(prometheus.NewRegistry())
	c := &compiled{label: "127.0.0.1:8080/tcp", rx: rx}
	b.Run("WithLabelValues", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			rx.CHWBLPicks.WithLabelValues(c.label, chwbl.SourcePrefix.String()).Inc()
		}
	})
	b.Run("cached", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c.countPick(chwbl.SourcePrefix, 0)
		}
	})
}

// TestCounterCacheSeries: cached P/D counters land on the series
// WithLabelValues names, one child per distinct key.
func TestCounterCacheSeries(t *testing.T) {
	pdm := metrics.NewPD(prometheus.NewRegistry())
	var cc counterCache
	for range 2 {
		cc.get(pdm.LegRequests, "r1", [3]string{"10.0.0.1:8000", "prefill", "200"}).Inc()
	}
	cc.get(pdm.LegRequests, "r1", [3]string{"10.0.0.2:8000", "decode", "200"}).Inc()
	if got := metricValue(t, pdm.LegRequests.WithLabelValues("r1", "10.0.0.1:8000", "prefill", "200")); got != 2 {
		t.Errorf("prefill legs = %v, want 2", got)
	}
	if got := metricValue(t, pdm.LegRequests); got != 3 {
		t.Errorf("all legs = %v, want 3", got)
	}
	if len(cc.m) != 2 {
		t.Errorf("cache holds %d children, want 2", len(cc.m))
	}
}

// BenchmarkCountLeg is one P/D leg's counter: cached vs WithLabelValues.
func BenchmarkCountLeg(b *testing.B) {
	pdm := metrics.NewPD(prometheus.NewRegistry())
	var cc counterCache
	b.Run("WithLabelValues", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			pdm.LegRequests.WithLabelValues("127.0.0.1:8080/tcp", "10.0.0.1:8000", "prefill", "200").Inc()
		}
	})
	b.Run("cached", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			cc.get(pdm.LegRequests, "127.0.0.1:8080/tcp", [3]string{"10.0.0.1:8000", "prefill", "200"}).Inc()
		}
	})
}

// TestLLMSeriesCached: the LLM families count through the rule's cached
// children exactly as the per-request WithLabelValues lookup did (the
// labeller replayed on the same model sequence says which label each
// request gets), and a flood of distinct client model names keeps both the
// series and the rule's cache within the label cap.
func TestLLMSeriesCached(t *testing.T) {
	rt, _ := newTestRuntime(t, testOptions())
	e := startEngine(t, "e1")
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	const proxied = 3
	c := testClient()
	for range proxied {
		if res := post(t, c, ruleURL(r)+"/v1/completions", completionBody); res.status != 200 {
			t.Fatalf("status %d %s", res.status, res.body)
		}
	}
	// The engine names its model in the answer; a client-chosen name
	// reaches the label when the gateway reads the request, which here is
	// played on the installed generation directly.
	cl := rt.rules[r.Key].cur.Load()
	const flood = pd.DefaultMaxModelLabels + 24
	replay := pd.NewModelLabels("", 0)
	want := map[string]uint64{replay.Label("fake-model", true): proxied}
	for i := range flood {
		model := fmt.Sprintf("flood-%d", i)
		if i%4 == 0 {
			model = "fake-model" // a repeated name keeps its label
		}
		x := &exchange{}
		x.obs.c, x.obs.model, x.obs.endpoint = cl, model, 0
		x.obs.clock.Reset(httptest.NewRecorder())
		x.obs.clock.WriteHeader(http.StatusOK)
		rt.observeLLM(x, http.StatusOK, time.Millisecond, 2*time.Millisecond, 0, false)
		want[replay.Label(model, true)]++
	}
	for label, w := range want {
		if got, _ := histCount(t, rt.llm.Duration, r.Name, label); got != w {
			t.Errorf("duration{model=%s} = %d observations, want %d", label, got, w)
		}
	}
	if got, _ := histCount(t, rt.llm.Endpoint, r.Name, e.Addr(), metrics.EndpointPhaseServe); got != proxied+flood {
		t.Errorf("endpoint serve observations %d, want %d", got, proxied+flood)
	}
	if got, bound := seriesCount(rt.llm.Duration), pd.DefaultMaxModelLabels+1; got != len(want) || got > bound {
		t.Errorf("%d duration series, want %d (at most %d)", got, len(want), bound)
	}
	cached := len(*cl.llm.models.Load())
	if cached != len(want) {
		t.Errorf("rule caches %d model labels, want %d", cached, len(want))
	}
}

// TestSeriesKnownModel: a request's label and children are the labeller's
// and the label map's whether they come from the rule's latest own-label
// model (llmSeries.known) or from the lookups, and only a model whose label
// is its own name is remembered.
func TestSeriesKnownModel(t *testing.T) {
	type req struct {
		model     string
		status    int
		wantLabel string
		remembers string // the rule's latest own-label model after it; "": none yet
	}
	for _, tc := range []struct {
		name   string
		pinned string
		max    int
		reqs   []req
	}{
		{"learned, then known", "", 2, []req{
			{"a", 200, "a", "a"}, {"a", 200, "a", "a"}, {"a", 500, "a", "a"},
		}},
		{"unserved first: other, not remembered", "", 2, []req{
			{"a", 404, pd.ModelOther, ""}, {"a", 200, "a", "a"}, {"a", 404, "a", "a"},
		}},
		{"alternating models", "", 2, []req{
			{"a", 200, "a", "a"}, {"b", 200, "b", "b"}, {"a", 200, "a", "a"}, {"c", 200, pd.ModelOther, "a"}, {"b", 200, "b", "b"},
		}},
		{"cap reached: other for new names", "", 1, []req{
			{"a", 200, "a", "a"}, {"b", 200, pd.ModelOther, "a"}, {"b", 200, pd.ModelOther, "a"},
		}},
		{"pinned", "p", 2, []req{
			{"x", 200, "p", ""}, {"p", 200, "p", "p"}, {"x", 200, "p", "p"}, {"p", 404, "p", "p"},
		}},
		{"no model", "", 2, []req{
			{"", 200, pd.ModelOther, ""}, {"a", 200, "a", "a"}, {"", 200, pd.ModelOther, "a"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &compiled{llmModels: pd.NewModelLabels(tc.pinned, tc.max)}
			for i, r := range tc.reqs {
				x := &exchange{}
				x.obs.c, x.obs.model = c, r.model
				x.obs.clock.Reset(httptest.NewRecorder())
				x.obs.clock.WriteHeader(r.status)
				ms := x.obs.series()
				if got := x.obs.modelLabel(); got != r.wantLabel {
					t.Fatalf("request %d (%q): label %q, want %q", i, r.model, got, r.wantLabel)
				}
				if want := c.llm.model(r.wantLabel); ms != want {
					t.Fatalf("request %d (%q): children %p, want the label's %p", i, r.model, ms, want)
				}
				got := ""
				if l := c.llm.last.Load(); l != nil {
					got = l.model
				}
				if got != r.remembers {
					t.Fatalf("request %d (%q): remembered %q, want %q", i, r.model, got, r.remembers)
				}
			}
		})
	}
}

// TestSeriesAlternatingModelsAllocateNothing: a rule whose answers
// alternate between learned models moves its latest model by a pointer
// store, without an allocation per switch.
func TestSeriesAlternatingModelsAllocateNothing(t *testing.T) {
	c := &compiled{llmModels: pd.NewModelLabels("", 4)}
	rec := httptest.NewRecorder()
	models := []string{"a", "b", "c"}
	for _, m := range models { // learned, and their children made
		x := &exchange{}
		x.obs.c, x.obs.model = c, m
		x.obs.clock.Reset(rec)
		x.obs.clock.WriteHeader(http.StatusOK)
		x.obs.series()
	}
	var x exchange
	i := 0
	allocs := testing.AllocsPerRun(100, func() {
		x.obs = reqObs{}
		x.obs.c, x.obs.model = c, models[i%len(models)]
		x.obs.clock.Reset(rec)
		x.obs.clock.WriteHeader(http.StatusOK)
		if ms := x.obs.series(); ms != c.llm.model(models[i%len(models)]) {
			t.Fatalf("request %d: children of another label", i)
		}
		i++
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per request, want 0", allocs)
	}
}

// seriesCount is how many series c exports now.
func seriesCount(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric)
	go func() { c.Collect(ch); close(ch) }()
	n := 0
	for range ch {
		n++
	}
	return n
}

// BenchmarkObserveLLM is one successful request's LLM observations
// (endpoint serve latency, duration, TTFT) on a rule's installed
// generation: the cached children.
func BenchmarkObserveLLM(b *testing.B) {
	rt := New(DefaultOptions(), nil, nil)
	defer func() { _ = rt.Close(b.Context()) }()
	r := newRule("127.0.0.1", freePort(b), spec.SelRoundRobin, spec.Endpoint{ID: "10.0.0.1:8000", Addr: mustAddrPort("10.0.0.1:8000"), Weight: 1})
	if err := rt.Install(nil, r); err != nil {
		b.Fatal(err)
	}
	cl := rt.rules[r.Key].cur.Load()
	rec := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		x := exchange{}
		x.obs.c, x.obs.model, x.obs.endpoint = cl, "fake-model", 0
		x.obs.clock.Reset(rec)
		x.obs.clock.WriteHeader(http.StatusOK)
		rt.observeLLM(&x, http.StatusOK, time.Millisecond, 2*time.Millisecond, 0, false)
	}
}
