package datapath

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/datapath/flow"
	"github.com/infergate/infergate/internal/pdfake"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/spec"
	"github.com/infergate/infergate/tenant"
)

// gatedEngine is an engine that holds every completion until the test
// lets it go, and records how many it held at once.
type gatedEngine struct {
	srv       *httptest.Server
	gate      chan struct{} // one receive lets one request finish
	cur, peak atomic.Int32
	seen      atomic.Int32
	names     chan string // the X-Test-Name of each request, in arrival order
}

func startGatedEngine(t *testing.T) *gatedEngine {
	t.Helper()
	g := &gatedEngine{gate: make(chan struct{}, 1024), names: make(chan string, 1024)}
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := g.cur.Add(1)
		for p := g.peak.Load(); n > p && !g.peak.CompareAndSwap(p, n); p = g.peak.Load() {
		}
		g.seen.Add(1)
		g.names <- r.Header.Get("X-Test-Name")
		select {
		case <-g.gate:
		case <-r.Context().Done():
		}
		g.cur.Add(-1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"choices":[{"text":"ok"}]}`))
	}))
	t.Cleanup(func() {
		close(g.gate) // let anything still held go
		g.srv.Close()
	})
	return g
}

func (g *gatedEngine) endpoint(t *testing.T) spec.Endpoint {
	return epFor(t, strings.TrimPrefix(g.srv.URL, "http://"), 1)
}

// flowRule installs a single-pool rule over engines with window win each.
func flowRule(t *testing.T, o Options, win int, engines ...*gatedEngine) (*Runtime, *spec.Rule, *metrics.Metrics) {
	t.Helper()
	var eps []spec.Endpoint
	for _, g := range engines {
		eps = append(eps, g.endpoint(t))
	}
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, eps...)
	r.AdmissionWindow = win
	rt, m := installWithMetrics(t, o, r)
	return rt, r, m
}

// installWithMetrics starts a runtime with the full metric set (flow
// control's included), closed when the test ends, and installs r on it.
func installWithMetrics(t *testing.T, o Options, r *spec.Rule) (*Runtime, *metrics.Metrics) {
	t.Helper()
	m := metrics.New()
	rt := NewWithMetrics(o, m, nil)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Close(ctx)
	})
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	return rt, m
}

func (rt *Runtime) queueLen(r *spec.Rule) int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if q := rt.rules[r.Key].flow; q != nil {
		return q.Len()
	}
	return 0
}

type asyncResult struct {
	result
	took time.Duration
}

// postAsync sends a completion in the background.
func postAsync(t *testing.T, ctx context.Context, c *http.Client, url string, hdr ...string) <-chan asyncResult {
	out := make(chan asyncResult, 1)
	go func() {
		start := time.Now()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions", strings.NewReader(completionBody))
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := c.Do(req)
		if err != nil {
			out <- asyncResult{result: result{status: -1, body: err.Error()}, took: time.Since(start)}
			return
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		out <- asyncResult{result: result{status: resp.StatusCode, header: resp.Header, body: b.String()}, took: time.Since(start)}
	}()
	return out
}

// TestWindowBoundsEachEngine: no engine ever holds more than its window
// from the gateway; the rest wait in the queue and all are served.
func TestWindowBoundsEachEngine(t *testing.T) {
	a, b := startGatedEngine(t), startGatedEngine(t)
	o := testOptions()
	o.Flow.MaxWait = 10 * time.Second
	rt, r, _ := flowRule(t, o, 2, a, b)
	c := testClient()
	const n = 10
	var outs []<-chan asyncResult
	for range n {
		outs = append(outs, postAsync(t, context.Background(), c, ruleURL(r)))
	}
	waitFor(t, 15*time.Second, "4 in the engines and 6 queued", func() bool {
		return a.cur.Load()+b.cur.Load() == 4 && rt.queueLen(r) == n-4
	})
	for range n {
		a.gate <- struct{}{}
		b.gate <- struct{}{}
	}
	for _, ch := range outs {
		if res := <-ch; res.status != http.StatusOK {
			t.Fatalf("status %d: %s", res.status, res.body)
		}
	}
	if a.peak.Load() > 2 || b.peak.Load() > 2 {
		t.Fatalf("peaks %d and %d over the window of 2", a.peak.Load(), b.peak.Load())
	}
	if a.seen.Load()+b.seen.Load() != n {
		t.Fatalf("engines saw %d requests, want %d", a.seen.Load()+b.seen.Load(), n)
	}
}

// TestWindowSkipsFullEndpoint: an endpoint at its window is not picked
// while another has room, whatever round robin says.
func TestWindowSkipsFullEndpoint(t *testing.T) {
	small, big := startGatedEngine(t), startGatedEngine(t)
	o := testOptions()
	eps := []spec.Endpoint{small.endpoint(t), big.endpoint(t)}
	eps[0].Window = 1
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, eps...)
	r.AdmissionWindow = 8
	rt, _ := newTestRuntime(t, o)
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	c := testClient()
	var outs []<-chan asyncResult
	for range 6 {
		outs = append(outs, postAsync(t, context.Background(), c, ruleURL(r)))
	}
	waitFor(t, 15*time.Second, "6 requests in the engines", func() bool { return small.cur.Load()+big.cur.Load() == 6 })
	if small.cur.Load() != 1 || big.cur.Load() != 5 {
		t.Fatalf("small holds %d, big %d; want 1 and 5", small.cur.Load(), big.cur.Load())
	}
	if rt.queueLen(r) != 0 {
		t.Fatal("requests queued while an endpoint had room")
	}
	for range 6 {
		small.gate <- struct{}{}
		big.gate <- struct{}{}
	}
	for _, ch := range outs {
		<-ch
	}
}

// TestShedAnswers: over the queue's length requests are shed at once, and
// queued ones at the wait bound; every shed is a 503
// worker_overload_protection_shed (SMG's code, spelled out here because it
// is the wire contract) with a Retry-After, within its bound; nothing shed
// reaches an engine.
func TestShedAnswers(t *testing.T) {
	g := startGatedEngine(t)
	o := testOptions()
	o.Flow.QueueLength = 2
	o.Flow.MaxWait = 300 * time.Millisecond
	rt, r, m := flowRule(t, o, 1, g)
	c := testClient()
	hold := postAsync(t, context.Background(), c, ruleURL(r))
	waitFor(t, 15*time.Second, "one request in the engine", func() bool { return g.cur.Load() == 1 })
	var outs []<-chan asyncResult
	for range 6 {
		outs = append(outs, postAsync(t, context.Background(), c, ruleURL(r)))
	}
	for _, ch := range outs {
		res := <-ch
		if res.status != http.StatusServiceUnavailable || res.header.Get(HeaderError) != CodeOverloadShed {
			t.Fatalf("status %d %q: %s", res.status, res.header.Get(HeaderError), res.body)
		}
		if errorCode(t, res.body) != "worker_overload_protection_shed" {
			t.Fatalf("body code: %s", res.body)
		}
		if ra, err := strconv.Atoi(res.header.Get(headerRetryAfter)); err != nil || ra < 1 {
			t.Fatalf("Retry-After %q", res.header.Get(headerRetryAfter))
		}
		// The bound is 300 ms; without it nothing would answer before the
		// held request is let go below. The rest is a loaded machine's slack.
		if res.took > 15*time.Second {
			t.Fatalf("shed after %v, bound 300ms", res.took)
		}
	}
	g.gate <- struct{}{}
	if res := <-hold; res.status != http.StatusOK {
		t.Fatalf("held request: %d", res.status)
	}
	if g.seen.Load() != 1 {
		t.Fatalf("engine saw %d requests, want only the admitted one", g.seen.Load())
	}
	if rt.queueLen(r) != 0 {
		t.Fatal("queue not empty")
	}
	full := metricValue(t, m.Flow.Shed.WithLabelValues(r.Name, "standard", flow.ReasonQueueFull))
	waited := metricValue(t, m.Flow.Shed.WithLabelValues(r.Name, "standard", flow.ReasonTimeout))
	if full != 4 || waited != 2 {
		t.Fatalf("shed counters queue_full %v wait_exceeded %v", full, waited)
	}
}

// TestPriorityDispatch: the queue lets a high-class request through before
// low ones that arrived earlier; a class the gateway does not grant is
// clamped, and an unknown one is the default class.
func TestPriorityDispatch(t *testing.T) {
	g := startGatedEngine(t)
	o := testOptions()
	o.Flow.MaxWait = 10 * time.Second
	o.Flow.MinShare = 0
	o.Flow.UnkeyedCeiling = "standard"
	rt, r, m := flowRule(t, o, 1, g)
	c := testClient()
	hold := postAsync(t, context.Background(), c, ruleURL(r), "X-Test-Name", "hold")
	waitFor(t, 15*time.Second, "the held request", func() bool { return g.cur.Load() == 1 })
	<-g.names
	var outs []<-chan asyncResult
	submit := func(name string, hdr ...string) {
		before := rt.queueLen(r)
		outs = append(outs, postAsync(t, context.Background(), c, ruleURL(r), append(hdr, "X-Test-Name", name)...))
		waitFor(t, 15*time.Second, name+" queued", func() bool { return rt.queueLen(r) == before+1 })
	}
	submit("low", HeaderPriority, "low")
	submit("asks-high", HeaderPriority, "high")         // clamped to standard
	submit("unknown", HeaderObjective, "no-such-class") // default: standard
	submit("std", HeaderObjective, "standard")
	g.gate <- struct{}{}
	<-hold
	var order []string
	for range 4 {
		g.gate <- struct{}{}
		order = append(order, <-g.names)
	}
	if got := strings.Join(order, " "); got != "asks-high unknown std low" {
		t.Fatalf("dispatch order %q", got)
	}
	for _, ch := range outs {
		<-ch
	}
	if v := metricValue(t, m.Flow.Downgrades.WithLabelValues(r.Name, downAboveGrant)); v != 1 {
		t.Fatalf("above_grant downgrades %v", v)
	}
	if v := metricValue(t, m.Flow.Downgrades.WithLabelValues(r.Name, downUnknownName)); v != 1 {
		t.Fatalf("unknown_class downgrades %v", v)
	}
}

// TestQueuedClientLeaves: a client that goes away while queued releases
// its place at once and is counted client_gone.
func TestQueuedClientLeaves(t *testing.T) {
	g := startGatedEngine(t)
	o := testOptions()
	o.Flow.MaxWait = time.Minute
	rt, r, m := flowRule(t, o, 1, g)
	c := testClient()
	hold := postAsync(t, context.Background(), c, ruleURL(r))
	waitFor(t, 15*time.Second, "the held request", func() bool { return g.cur.Load() == 1 })
	ctx, cancel := context.WithCancel(context.Background())
	gone := postAsync(t, ctx, c, ruleURL(r))
	waitFor(t, 15*time.Second, "one queued", func() bool { return rt.queueLen(r) == 1 })
	cancel()
	<-gone
	waitFor(t, 15*time.Second, "the queue to empty", func() bool { return rt.queueLen(r) == 0 })
	waitFor(t, 15*time.Second, "client_gone counted", func() bool {
		return metricValue(t, m.Flow.Requests.WithLabelValues(r.Name, "standard", flowClientGone)) == 1
	})
	g.gate <- struct{}{}
	<-hold
	if g.seen.Load() != 1 {
		t.Fatalf("engine saw %d, want 1", g.seen.Load())
	}
}

// TestQueueFloodIsolated: a flood of one rule is shed at its queue's
// bound without delay, while another rule of the same runtime serves.
func TestQueueFloodIsolated(t *testing.T) {
	g := startGatedEngine(t)
	o := testOptions()
	o.Flow.QueueLength = 4
	o.Flow.MaxWait = time.Minute // the queued four stay queued: every answer below is a flood shed
	rt, r, m := flowRule(t, o, 1, g)
	other := startEngine(t, "other")
	r2 := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, other.Addr(), 1))
	r2.Name = "other"
	if err := rt.Install(nil, r2); err != nil {
		t.Fatal(err)
	}
	c := testClient()
	c.Timeout = time.Minute // a loaded test machine can be slow to connect 30 clients at once
	var outs []<-chan asyncResult
	for range 30 {
		outs = append(outs, postAsync(t, context.Background(), c, ruleURL(r)))
	}
	waitFor(t, 15*time.Second, "the queue to fill", func() bool { return rt.queueLen(r) == 4 })
	if res := post(t, c, ruleURL(r2)+"/v1/completions", completionBody); res.status != http.StatusOK {
		t.Fatalf("other rule: %d %s", res.status, res.body)
	}
	// The queued four wait a minute: the other rule served while they still
	// queue, so it did not wait behind them.
	if n := rt.queueLen(r); n != 4 {
		t.Fatalf("queue holds %d after the other rule served, want the flood's 4", n)
	}
	if st, ok := rt.Status(r.Key); !ok || len(st.Endpoints) != 1 {
		t.Fatalf("status during the flood: %+v %v", st, ok)
	}
	answered := make([]bool, len(outs))
	shed := 0
	for end := time.Now().Add(30 * time.Second); shed < 25 && time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		for k, ch := range outs { // 1 in the engine, 4 queued: the rest are shed on arrival
			select {
			case res := <-ch:
				if res.status != http.StatusServiceUnavailable || res.header.Get(HeaderError) != CodeOverloadShed {
					buf := make([]byte, 1<<22)
					buf = buf[:runtime.Stack(buf, true)]
					for _, gr := range strings.Split(string(buf), "\n\n") {
						if strings.Contains(gr, "infergate/datapath.") && !strings.Contains(gr, "tRunner") {
							t.Log(gr)
						}
					}
					t.Fatalf("flood answer %d after %v (%d shed so far, queue %d, engine %d): %s", res.status, res.took, shed, rt.queueLen(r), g.cur.Load(), res.body)
				}
				answered[k] = true
				shed++
			default:
			}
		}
	}
	if shed != 25 {
		t.Fatalf("%d shed, want 25", shed)
	}
	if v := metricValue(t, m.Flow.Shed.WithLabelValues(r.Name, "standard", flow.ReasonQueueFull)); v != 25 {
		t.Fatalf("queue_full sheds %v, want 25", v)
	}
	for range 5 {
		g.gate <- struct{}{}
	}
	for k, ch := range outs {
		if answered[k] {
			continue
		}
		select {
		case res := <-ch:
			if res.status != http.StatusOK {
				t.Fatalf("a queued request got %d", res.status)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("a queued request was not served after the engine freed")
		}
	}
}

// TestFlowTicket: the class, fairness group and deadline of a request.
func TestFlowTicket(t *testing.T) {
	reg, err := tenant.Open(tenant.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	admit := func(grant string) *keyCheck {
		k, err := reg.Create(tenant.KeySpec{TenantID: "team-" + grant, Name: "k-" + grant, MaxPriority: grant})
		if err != nil {
			t.Fatal(err)
		}
		adm, d := reg.Admit(tenant.Check{Key: k.RawKey, ClientIP: "127.0.0.1"})
		if d != nil {
			t.Fatal(d.Message)
		}
		return &keyCheck{adm: adm}
	}
	keyHigh, keyLow, keyNone := admit("high"), admit("low"), admit("")
	o := DefaultOptions()
	o.Flow.UnkeyedCeiling = "high"
	o.Flow.KeyCeiling = "standard"
	rt, _ := newTestRuntime(t, o)
	c := &compiled{label: "t"}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		key      *keyCheck
		hdr      []string
		class    flow.Class
		tenant   string
		deadline time.Duration // 0: none
	}{
		{"nothing asked", nil, nil, flow.ClassStandard, "", 0},
		{"unkeyed asks high", nil, []string{HeaderPriority, "high"}, flow.ClassHigh, "", 0},
		{"objective header", nil, []string{HeaderObjective, "critical"}, flow.ClassHigh, "", 0},
		{"priority header wins", nil, []string{HeaderPriority, "low", HeaderObjective, "high"}, flow.ClassLow, "", 0},
		{"unknown class", nil, []string{HeaderPriority, "platinum"}, flow.ClassStandard, "", 0},
		{"fairness id without a key", nil, []string{HeaderFairnessID, "batch-7"}, flow.ClassStandard, "batch-7", 0},
		{"long fairness id cut", nil, []string{HeaderFairnessID, strings.Repeat("x", 300)}, flow.ClassStandard, strings.Repeat("x", maxFairnessID), 0},
		{"key grants high", keyHigh, []string{HeaderPriority, "high"}, flow.ClassHigh, "team-high", 0},
		{"key grants low: clamped", keyLow, []string{HeaderPriority, "high"}, flow.ClassLow, "team-low", 0},
		{"key grants low: default clamped", keyLow, nil, flow.ClassLow, "team-low", 0},
		{"key without grant: gateway's", keyNone, []string{HeaderPriority, "high"}, flow.ClassStandard, "team-", 0},
		{"key ignores fairness id", keyHigh, []string{HeaderFairnessID, "other"}, flow.ClassStandard, "team-high", 0},
		{"deadline", nil, []string{HeaderSLOTTFT, "1500"}, flow.ClassStandard, "", 1500 * time.Millisecond},
		{"deadline capped", nil, []string{HeaderSLOTTFT, "999999999999"}, flow.ClassStandard, "", 10 * time.Minute},
		{"deadline overflowing: capped", nil, []string{HeaderSLOTTFT, "99999999999999999999999"}, flow.ClassStandard, "", 10 * time.Minute},
		{"negative deadline ignored", nil, []string{HeaderSLOTTFT, "-5"}, flow.ClassStandard, "", 0},
		{"zero deadline ignored", nil, []string{HeaderSLOTTFT, "0"}, flow.ClassStandard, "", 0},
		{"fractional deadline ignored", nil, []string{HeaderSLOTTFT, "1.5"}, flow.ClassStandard, "", 0},
		{"garbage deadline ignored", nil, []string{HeaderSLOTTFT, "soon"}, flow.ClassStandard, "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/v1/completions", nil)
			for i := 0; i+1 < len(tc.hdr); i += 2 {
				r.Header.Set(tc.hdr[i], tc.hdr[i+1])
			}
			tk := rt.flowTicket(c, r.Header, tc.key, start)
			var want time.Time
			if tc.deadline > 0 {
				want = start.Add(tc.deadline)
			}
			if tk.Class != tc.class || tk.Tenant != tc.tenant || !tk.Deadline.Equal(want) {
				t.Fatalf("ticket %v %q %v; want %v %q %v", tk.Class, tk.Tenant, tk.Deadline, tc.class, tc.tenant, want)
			}
		})
	}
}

// TestPDDecodeWindow: on a P/D rule the window bounds each decode; the
// requests beyond wait and are all served.
func TestPDDecodeWindow(t *testing.T) {
	pre := startPDFake(t, pdfake.VLLM, pdfake.Prefill, "127.0.0.20:0", 0)
	var decodes []*pdfake.Engine
	eps := []spec.Endpoint{pre.Endpoint()}
	for i := range 2 {
		cfg := pdfake.DefaultConfig(pdfake.VLLM, pdfake.Decode)
		cfg.Addr = fmt.Sprintf("127.0.0.%d:0", 30+i)
		cfg.StreamChunks = 4
		cfg.ChunkDelay = 20 * time.Millisecond
		e, err := pdfake.Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		decodes = append(decodes, e)
		eps = append(eps, e.Endpoint())
	}
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, eps...)
	r.Name = "pd-window"
	r.Engine = spec.EngineVLLM
	r.PD = &spec.PD{SessionTTL: time.Minute, BalanceAbsThreshold: 3, CacheThreshold: 20}
	r.AdmissionWindow = 1
	o := pdTestOptions()
	o.Flow.MaxWait = 20 * time.Second
	rt, m := installWithMetrics(t, o, r)
	ok, peak := servePDPeak(t, rt, r, 8)
	if ok != 8 {
		t.Fatalf("%d of 8 served", ok)
	}
	if peak > 1 {
		t.Fatalf("a decode held %d requests at once, window 1", peak)
	}
	if q := metricValue(t, m.Flow.Requests.WithLabelValues(r.Name, "standard", flowQueued)); q == 0 {
		t.Fatal("no request waited: the windows were not in the way")
	}
}
