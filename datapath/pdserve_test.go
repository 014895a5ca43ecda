package datapath

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/infergate/infergate/datapath/pd"
	"github.com/infergate/infergate/internal/fakeengine"
	"github.com/infergate/infergate/internal/pdfake"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/spec"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// pdFleet is a P/D rule served by a real Runtime over recording fakes on
// distinct loopback IPs (like distinct hosts).
type pdFleet struct {
	rt       *Runtime
	reg      *prometheus.Registry
	rule     *spec.Rule
	prefills []*pdfake.Engine
	decodes  []*pdfake.Engine
}

func pdFakeDialect(e spec.Engine) pdfake.Dialect {
	switch e {
	case spec.EngineSGLang:
		return pdfake.SGLang
	case spec.EngineTRTLLM:
		return pdfake.TRTLLM
	}
	return pdfake.VLLM
}

// startPDFake starts one fake engine closed when the test ends.
func startPDFake(t *testing.T, d pdfake.Dialect, role pdfake.Role, addr string, boot uint16) *pdfake.Engine {
	t.Helper()
	e, err := tryPDFake(t, d, role, addr, boot)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// tryPDFake is startPDFake returning the start error (a shared SGLang
// bootstrap port may be taken on another IP by another test process).
func tryPDFake(t *testing.T, d pdfake.Dialect, role pdfake.Role, addr string, boot uint16) (*pdfake.Engine, error) {
	t.Helper()
	cfg := pdfake.DefaultConfig(d, role)
	cfg.Addr, cfg.BootstrapPort = addr, boot
	cfg.RendezvousTimeout = 10 * time.Second
	cfg.StreamChunks = 3
	e, err := pdfake.Start(cfg)
	if err != nil {
		return nil, fmt.Errorf("start fake %s %s on %s: %w", d, role, addr, err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e, nil
}

// startPrefills starts np prefills on 127.0.0.20+i; SGLang's share the
// first one's ephemeral bootstrap port, retried on a new port when another
// process holds it on a later IP.
func startPrefills(t *testing.T, d pdfake.Dialect, np int) ([]*pdfake.Engine, uint16) {
	t.Helper()
	for attempt := 0; ; attempt++ {
		var out []*pdfake.Engine
		var boot uint16
		var err error
		for i := range np {
			var e *pdfake.Engine
			if e, err = tryPDFake(t, d, pdfake.Prefill, fmt.Sprintf("127.0.0.%d:0", 20+i), boot); err != nil {
				break
			}
			boot = e.BootstrapPort()
			out = append(out, e)
		}
		if err == nil {
			return out, boot
		}
		if attempt == 4 || !errors.Is(err, syscall.EADDRINUSE) {
			t.Fatal(err)
		}
		for _, e := range out {
			_ = e.Close()
		}
	}
}

// pdTestOptions are testOptions with P/D deadlines generous enough for a
// loaded box (fault cases override them).
func pdTestOptions() Options {
	o := testOptions()
	o.PrefillTimeout = 10 * time.Second
	o.DecodeFirstByteTimeout = 10 * time.Second
	return o
}

// newPDFleet starts np prefills and nd decodes of engine and installs a P/D
// rule over them (probes off unless mod sets them).
func newPDFleet(t *testing.T, o Options, engine spec.Engine, np, nd int, mod ...func(*spec.Rule)) *pdFleet {
	t.Helper()
	d := pdFakeDialect(engine)
	f := &pdFleet{reg: prometheus.NewRegistry()}
	var eps []spec.Endpoint
	prefills, boot := startPrefills(t, d, np) // SGLang: one rule-wide port, distinct IPs
	for _, e := range prefills {
		f.prefills = append(f.prefills, e)
		eps = append(eps, e.Endpoint())
	}
	for i := range nd {
		e := startPDFake(t, d, pdfake.Decode, fmt.Sprintf("127.0.0.%d:0", 30+i), 0)
		f.decodes = append(f.decodes, e)
		eps = append(eps, e.Endpoint())
	}
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, eps...)
	r.Name = "pd-" + string(engine)
	r.Engine = engine
	r.PD = &spec.PD{SessionTTL: time.Minute, BootstrapPort: boot, BalanceAbsThreshold: 3, CacheThreshold: 20}
	for _, m := range mod {
		m(r)
	}
	f.rule = r
	m := metrics.New()
	f.reg = m.Registry
	f.rt = NewWithMetrics(o, m, nil)
	closeAtEnd(t, f.rt)
	if err := f.rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *pdFleet) url(path string) string { return ruleURL(f.rule) + path }

// pdBody is a client body for path.
func pdBody(path string, stream bool, extra string) string {
	if strings.HasSuffix(path, "/chat/completions") {
		return fmt.Sprintf(`{"model":"fake-model","messages":[{"role":"user","content":"hello there"}],"max_tokens":3,"stream":%v%s}`, stream, extra)
	}
	return fmt.Sprintf(`{"model":"fake-model","prompt":"hello there","max_tokens":3,"stream":%v%s}`, stream, extra)
}

// counterSum sums the counters of family name whose labels include want.
func counterSum(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, fam := range fams {
		if fam.GetName() != name {
			continue
		}
	metric:
		for _, m := range fam.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue metric
				}
			}
			sum += metricOf(m)
		}
	}
	return sum
}

// waitCounter waits (bounded) for a counter to reach want: the handler
// records metrics after the client already has its answer.
func waitCounter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string, want float64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := counterSum(t, reg, name, labels)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s%v = %v, want %v", name, labels, got, want)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func metricOf(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}

// legMarkers are substrings every leg of a dialect must carry.
func legMarkers(e spec.Engine) (prefill, decode string) {
	switch e {
	case spec.EngineSGLang:
		return `"bootstrap_room"`, `"bootstrap_room"`
	case spec.EngineTRTLLM:
		return `"context_only"`, `"generation_only"`
	}
	return `"do_remote_decode":true`, `"do_remote_prefill":true`
}

// TestPDEndToEnd runs every engine × topology × streaming through a real
// listener and asserts what the engines received, what the client got and
// that the per-leg metrics moved for every role.
func TestPDEndToEnd(t *testing.T) {
	engines := []spec.Engine{spec.EngineVLLM, spec.EngineSGLang, spec.EngineTRTLLM}
	topologies := []struct {
		name   string
		np, nd int
	}{{"1P1D", 1, 1}, {"2P2D", 2, 2}}
	for _, engine := range engines {
		for _, topo := range topologies {
			for _, stream := range []bool{false, true} {
				for _, path := range []string{pathCompletions, pathChatCompletions} {
					name := fmt.Sprintf("%s/%s/stream=%v%s", engine, topo.name, stream, path)
					t.Run(name, func(t *testing.T) {
						f := newPDFleet(t, pdTestOptions(), engine, topo.np, topo.nd)
						c := testClient()
						const n = 4
						for i := range n {
							res := post(t, c, f.url(path), pdBody(path, stream, ""), HeaderRequestID, fmt.Sprintf("req-%d", i))
							if res.status != http.StatusOK {
								t.Fatalf("request %d: %d %s", i, res.status, res.body)
							}
							if got := res.header.Get(HeaderRequestID); got != fmt.Sprintf("req-%d", i) {
								t.Errorf("X-Request-Id = %q, want the client's", got)
							}
							ct := res.header.Get(headerContentType)
							if stream {
								if !strings.HasPrefix(ct, contentTypeSSE) || !strings.Contains(res.body, "data: [DONE]") {
									t.Fatalf("stream answer: %s %q", ct, res.body)
								}
							} else if !strings.Contains(res.body, `"choices"`) || strings.Contains(res.body, "data:") {
								t.Fatalf("non-stream answer: %s %q", ct, res.body)
							}
						}
						pm, dm := legMarkers(engine)
						check := func(role string, es []*pdfake.Engine, marker string) {
							total := 0
							for _, e := range es {
								recs := e.Records()
								if len(es) > 1 && len(recs) == 0 {
									t.Errorf("%s %s got no request; load fallback should spread ties", role, e.Endpoint().ID)
								}
								for _, rec := range recs {
									if rec.Violation != "" {
										t.Errorf("%s %s: protocol violation %q", role, e.Endpoint().ID, rec.Violation)
									}
									if !bytes.Contains(rec.Body, []byte(marker)) {
										t.Errorf("%s %s: body lacks %s: %s", role, e.Endpoint().ID, marker, rec.Body)
									}
									if rec.Path != path {
										t.Errorf("%s got path %q, want %q", role, rec.Path, path)
									}
								}
								total += len(recs)
								labels := map[string]string{"endpoint": e.Endpoint().ID, "phase": role, "status": "200"}
								if engine == spec.EngineSGLang && role == "prefill" {
									// The decode may finish before the prefill's own answer is read;
									// the prefill leg then ends cancelled (status none).
									delete(labels, "status")
								}
								waitCounter(t, f.reg, "infergate_pd_leg_requests_total", labels, float64(len(recs)))
							}
							want := n
							if engine == spec.EngineTRTLLM && role == "decode" {
								want = -1 // TRT context may finish early; checked below
							}
							if want >= 0 && total != want {
								t.Errorf("%s legs = %d, want %d", role, total, want)
							}
						}
						check("prefill", f.prefills, pm)
						check("decode", f.decodes, dm)
						waitCounter(t, f.reg, "loxilb_ai_pd_requests_total", map[string]string{"status": "success"}, n)
						if got := counterSum(t, f.reg, "infergate_ladder_decisions_total", map[string]string{"tier": "tier2_load", "outcome": "hit"}); got != n {
							t.Errorf("tier2_load hits = %v, want %d", got, n)
						}
					})
				}
			}
		}
	}
}

// prefillOf returns which prefill engine of f received the last request
// carrying marker in its body (-1: none).
func (f *pdFleet) legCounts() (pre, dec []int) {
	for _, e := range f.prefills {
		pre = append(pre, len(e.Records()))
	}
	for _, e := range f.decodes {
		dec = append(dec, len(e.Records()))
	}
	return pre, dec
}

// TestPDSessionStickiness: a repeated body "user" or X-Conversation-Id pins
// the pair; a pinned prefill going down is re-chosen at once.
func TestPDSessionStickiness(t *testing.T) {
	cases := []struct {
		name   string
		extra  string
		header []string
	}{
		{"user", `,"user":"alice"`, nil},
		{"conversation header", "", []string{headerConversationID, "conv-42"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newPDFleet(t, pdTestOptions(), spec.EngineVLLM, 2, 2)
			c := testClient()
			const n = 5
			for i := range n {
				res := post(t, c, f.url(pathCompletions), pdBody(pathCompletions, false, tc.extra), tc.header...)
				if res.status != http.StatusOK {
					t.Fatalf("request %d: %d %s", i, res.status, res.body)
				}
			}
			pre, dec := f.legCounts()
			if !(pre[0] == n && pre[1] == 0 || pre[0] == 0 && pre[1] == n) || !(dec[0] == n && dec[1] == 0 || dec[0] == 0 && dec[1] == n) {
				t.Fatalf("session not sticky: prefills %v decodes %v", pre, dec)
			}
			waitCounter(t, f.reg, "loxilb_ai_pd_session_hits_total", nil, n-1)
		})
	}
}

// TestPDPinnedEndpointDown: the prober marks the pinned prefill down, the
// pin is dropped and the session moves to the other prefill.
func TestPDPinnedEndpointDown(t *testing.T) {
	f := newPDFleet(t, pdTestOptions(), spec.EngineVLLM, 2, 1, func(r *spec.Rule) {
		r.Probe = spec.Probe{Type: probeHTTP, Request: "/health", Timeout: 500 * time.Millisecond, Retries: 1}
	})
	waitFor(t, 5*time.Second, "rule ready", func() bool { st, _ := f.rt.Status(f.rule.Key); return st.Ready })
	c := testClient()
	body := pdBody(pathCompletions, false, `,"user":"bob"`)
	if res := post(t, c, f.url(pathCompletions), body); res.status != http.StatusOK {
		t.Fatalf("%d %s", res.status, res.body)
	}
	pre, _ := f.legCounts()
	pinned, other := 0, 1
	if pre[1] == 1 {
		pinned, other = 1, 0
	}
	_ = f.prefills[pinned].Close()
	id := f.prefills[pinned].Endpoint().ID
	waitFor(t, 5*time.Second, "pinned prefill down", func() bool {
		st, _ := f.rt.Status(f.rule.Key)
		return st.Endpoints[id].State == "down"
	})
	for i := range 3 {
		if res := post(t, c, f.url(pathCompletions), body); res.status != http.StatusOK {
			t.Fatalf("after down %d: %d %s", i, res.status, res.body)
		}
	}
	if got := len(f.prefills[other].Records()); got != 3 {
		t.Fatalf("other prefill got %d requests, want 3 (re-chosen and re-pinned)", got)
	}
	// Re-pinned: the three requests after the first re-choice hit Tier 0.
	waitCounter(t, f.reg, "loxilb_ai_pd_session_hits_total", nil, 2)
}

// TestPDLegFailures: each leg failing gives its documented answer, never a
// hang, and the decision is counted.
func TestPDLegFailures(t *testing.T) {
	cases := []struct {
		name     string
		engine   spec.Engine
		leg      string // prefill or decode
		fault    pdfake.Fault
		n        int
		status   int
		code     string // X-Infergate-Error; "" for a relayed engine answer or success
		kvFailed bool
	}{
		{"vllm prefill 500 recomputes", spec.EngineVLLM, "prefill", pdfake.Fault500, 1, 200, "", true},
		{"vllm prefill hang", spec.EngineVLLM, "prefill", pdfake.FaultHang, 1, 504, "pd_prefill_timeout", false},
		{"vllm decode hang", spec.EngineVLLM, "decode", pdfake.FaultHang, 1, 504, "pd_decode_timeout", false},
		{"vllm decode 400 relayed", spec.EngineVLLM, "decode", pdfake.Fault400, 1, 400, "", false},
		{"vllm decode drop", spec.EngineVLLM, "decode", pdfake.FaultDropBeforeFirstByte, 1, 502, "pd_decode_backend_died", false},
		{"sglang decode hang", spec.EngineSGLang, "decode", pdfake.FaultHang, 1, 504, "", false},
		{"trtllm prefill hang", spec.EngineTRTLLM, "prefill", pdfake.FaultHang, 1, 504, "pd_prefill_timeout", false},
		{"trtllm decode drop", spec.EngineTRTLLM, "decode", pdfake.FaultDropBeforeFirstByte, 1, 502, "pd_decode_backend_died", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := pdTestOptions()
			o.PrefillTimeout = 500 * time.Millisecond
			o.DecodeFirstByteTimeout = 500 * time.Millisecond
			f := newPDFleet(t, o, tc.engine, 1, 1)
			target := f.prefills[0]
			if tc.leg == "decode" {
				target = f.decodes[0]
			}
			target.Inject(tc.fault, tc.n)
			res := post(t, testClient(), f.url(pathCompletions), pdBody(pathCompletions, false, ""))
			if res.status != tc.status {
				t.Fatalf("status %d, want %d: %s", res.status, tc.status, res.body)
			}
			if got := res.header.Get(HeaderError); tc.code != "" && got != tc.code {
				t.Errorf("X-Infergate-Error = %q, want %q", got, tc.code)
			}
			waitCounter(t, f.reg, "loxilb_ai_pd_requests_total", nil, 1)
			if got := counterSum(t, f.reg, "loxilb_pd_kv_transfer_failure_total", nil); (got > 0) != tc.kvFailed {
				t.Errorf("kv transfer failures = %v, want >0: %v", got, tc.kvFailed)
			}
		})
	}
}

// TestPDBreakerDeadPrefill: a prefill that refuses connections opens its
// breaker after BreakerPDConnectFailures dial failures (clients are served
// by the alternative prefill meanwhile) and closes again once an engine is
// back after the open window.
func TestPDBreakerDeadPrefill(t *testing.T) {
	o := pdTestOptions()
	o.BreakerOpenFor = 300 * time.Millisecond
	f := newPDFleet(t, o, spec.EngineVLLM, 1, 1)
	deadAddr := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.29"), freePort(t))
	dead := spec.Endpoint{ID: deadAddr.String(), Addr: deadAddr, Weight: 1, Role: spec.RolePrefill, NixlPort: deadAddr.Port()}
	next := *f.rule
	next.Generation++
	next.Endpoints = append([]spec.Endpoint{dead}, f.rule.Endpoints...)
	if err := f.rt.Install(f.rule, &next); err != nil {
		t.Fatal(err)
	}
	f.rule = &next
	c := testClient()
	open := func() bool { st, _ := f.rt.Status(f.rule.Key); return st.Endpoints[dead.ID].Breaker == "open" }
	for i := 0; i < 20 && !open(); i++ {
		if res := post(t, c, f.url(pathCompletions), pdBody(pathCompletions, false, "")); res.status != http.StatusOK {
			t.Fatalf("request %d: %d %s (the alternative prefill should serve)", i, res.status, res.body)
		}
	}
	if !open() {
		t.Fatal("breaker of the dead prefill never opened")
	}
	if got := counterSum(t, f.reg, "infergate_pd_leg_requests_total", map[string]string{"endpoint": dead.ID, "status": legStatusNone}); got != 3 {
		t.Errorf("dead prefill legs = %v, want 3 (BreakerPDConnectFailures)", got)
	}
	before := counterSum(t, f.reg, "infergate_pd_leg_requests_total", map[string]string{"endpoint": dead.ID})
	for range 3 {
		post(t, c, f.url(pathCompletions), pdBody(pathCompletions, false, ""))
	}
	if got := counterSum(t, f.reg, "infergate_pd_leg_requests_total", map[string]string{"endpoint": dead.ID}); got != before {
		t.Errorf("open breaker still chosen: legs %v → %v", before, got)
	}
	// The engine comes back; after the window the half-open trial closes it.
	cfg := pdfake.DefaultConfig(pdfake.VLLM, pdfake.Prefill)
	cfg.Addr = deadAddr.String()
	back, err := pdfake.Start(cfg)
	if err != nil {
		t.Fatalf("restart on %s: %v", deadAddr, err)
	}
	t.Cleanup(func() { _ = back.Close() })
	time.Sleep(o.BreakerOpenFor)
	waitFor(t, 5*time.Second, "breaker closed", func() bool {
		post(t, c, f.url(pathCompletions), pdBody(pathCompletions, false, ""))
		st, _ := f.rt.Status(f.rule.Key)
		return st.Endpoints[dead.ID].Breaker == "closed"
	})
	if len(back.Records()) == 0 {
		t.Error("recovered prefill served nothing")
	}
}

// TestPDRole0FallbackAndReadiness: draining the only prefill makes the rule
// not ready; a role-0 endpoint then serves unsplit (counted), without one
// the answer is 503 pd_pool_unavailable; restoring the weight flips
// readiness back.
func TestPDRole0FallbackAndReadiness(t *testing.T) {
	f := newPDFleet(t, pdTestOptions(), spec.EngineVLLM, 1, 1)
	st, _ := f.rt.Status(f.rule.Key)
	if !st.Ready {
		t.Fatalf("1P1D not ready: %+v", st)
	}
	c := testClient()
	drained := *f.rule
	drained.Generation++
	drained.Endpoints = append([]spec.Endpoint(nil), f.rule.Endpoints...)
	drained.Endpoints[0].Weight = 0
	if err := f.rt.Install(f.rule, &drained); err != nil {
		t.Fatal(err)
	}
	st, _ = f.rt.Status(f.rule.Key)
	if st.Ready || st.Reason != "no usable prefill endpoint" {
		t.Fatalf("drained prefill: status %+v", st)
	}
	res := post(t, c, f.url(pathCompletions), pdBody(pathCompletions, false, ""))
	if res.status != http.StatusServiceUnavailable || errorCode(t, res.body) != CodePoolUnavailable {
		t.Fatalf("no pair, no role 0: %d %s", res.status, res.body)
	}

	whole := startEngine(t, "role0")
	withRole0 := drained
	withRole0.Generation++
	withRole0.Endpoints = append(append([]spec.Endpoint(nil), drained.Endpoints...), epFor(t, whole.Addr(), 1))
	if err := f.rt.Install(&drained, &withRole0); err != nil {
		t.Fatal(err)
	}
	res = post(t, c, f.url(pathCompletions), pdBody(pathCompletions, false, ""))
	if res.status != http.StatusOK || res.header.Get(fakeengine.HeaderEngine) != "role0" {
		t.Fatalf("role-0 fallback: %d %v %s", res.status, res.header, res.body)
	}
	waitCounter(t, f.reg, "loxilb_pd_fallback_to_normal_total", nil, 1)
	if st, _ := f.rt.Status(f.rule.Key); st.Ready {
		t.Errorf("role-0 fallback must not make the rule ready: %+v", st)
	}

	restored := withRole0
	restored.Generation++
	restored.Endpoints = append([]spec.Endpoint(nil), withRole0.Endpoints...)
	restored.Endpoints[0].Weight = 1
	if err := f.rt.Install(&withRole0, &restored); err != nil {
		t.Fatal(err)
	}
	if st, _ := f.rt.Status(f.rule.Key); !st.Ready {
		t.Fatalf("restored: %+v", st)
	}
	res = post(t, c, f.url(pathCompletions), pdBody(pathCompletions, false, ""))
	if res.status != http.StatusOK || res.header.Get(fakeengine.HeaderEngine) == "role0" {
		t.Fatalf("pair should serve again: %d %s", res.status, res.body)
	}
	if len(f.prefills[0].Records()) != 1 {
		t.Errorf("prefill records = %d, want 1", len(f.prefills[0].Records()))
	}
}

// TestPDBodylessRelay: GET /v1/models on a P/D rule is relayed plainly to a
// prefill: the engine's own model list comes back, not a gateway error.
func TestPDBodylessRelay(t *testing.T) {
	f := newPDFleet(t, pdTestOptions(), spec.EngineVLLM, 1, 1)
	req, err := http.NewRequest(http.MethodGet, f.url(pathModels), nil)
	if err != nil {
		t.Fatal(err)
	}
	res := do(t, testClient(), req)
	if res.status != http.StatusOK || res.header.Get(HeaderError) != "" || !strings.Contains(string(res.body), `"object":"list"`) {
		t.Fatalf("got %d %v %s; want the engine's own model list", res.status, res.header, res.body)
	}
	waitCounter(t, f.reg, "infergate_datapath_requests_total", map[string]string{"endpoint": f.prefills[0].Endpoint().ID}, 1)
}

// TestPDClientDisconnectCancelsLegs: a client leaving mid-stream cancels
// the decode leg and the handler returns (no hang).
func TestPDClientDisconnectCancelsLegs(t *testing.T) {
	d := pdfake.VLLM
	pre := startPDFake(t, d, pdfake.Prefill, "127.0.0.20:0", 0)
	cfg := pdfake.DefaultConfig(d, pdfake.Decode)
	cfg.Addr, cfg.StreamChunks, cfg.ChunkDelay = "127.0.0.30:0", 200, 20*time.Millisecond
	dec, err := pdfake.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dec.Close() })
	rt, _ := newTestRuntime(t, pdTestOptions())
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, pre.Endpoint(), dec.Endpoint())
	r.Engine, r.PD = spec.EngineVLLM, &spec.PD{SessionTTL: time.Minute}
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cctx, ccancel := context.WithCancel(ctx)
	req, _ := http.NewRequestWithContext(cctx, http.MethodPost, ruleURL(r)+pathCompletions, strings.NewReader(pdBody(pathCompletions, true, "")))
	resp, err := testClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if _, err := io.ReadAtLeast(resp.Body, buf, 1); err != nil {
		t.Fatal(err)
	}
	ccancel()
	resp.Body.Close()
	recs, err := dec.WaitDone(ctx, 1)
	if err != nil {
		t.Fatalf("decode leg never ended: %v", err)
	}
	if !recs[0].Cancelled {
		t.Error("decode leg not cancelled after the client left")
	}
}

// TestExplain: the dry run reports the ladder without side effects.
func TestExplain(t *testing.T) {
	f := newPDFleet(t, pdTestOptions(), spec.EngineVLLM, 2, 2, func(r *spec.Rule) { r.PD.CacheAware = true })
	body := []byte(pdBody(pathCompletions, false, `,"user":"carol"`))
	e, err := f.rt.Explain(context.Background(), f.rule.Key, pathCompletions, http.Header{}, body)
	if err != nil {
		t.Fatal(err)
	}
	if e.Outcome != spec.ExplainPair || e.Prefill == "" || e.Decode == "" || !e.HasSessionKey || len(e.Candidates) != 4 || e.Prefix == nil {
		t.Fatalf("explanation: %+v", e)
	}
	if e.Steps[0].Tier != "tier0_session" || e.Steps[0].Hit {
		t.Fatalf("first step %+v, want a session miss", e.Steps[0])
	}
	if len(e.Estimates) != 2 || e.Estimates[0].EstimateMs <= 0 || e.Estimates[0].PrefillMs <= 0 {
		t.Fatalf("cost estimates of the two prefills: %+v", e.Estimates)
	}
	// Explain pinned nothing: a real request still misses Tier 0.
	if res := post(t, testClient(), f.url(pathCompletions), string(body)); res.status != http.StatusOK {
		t.Fatalf("%d %s", res.status, res.body)
	}
	if got := counterSum(t, f.reg, "loxilb_ai_pd_session_hits_total", nil); got != 0 {
		t.Errorf("explain pinned a session: hits %v", got)
	}
	e, err = f.rt.Explain(context.Background(), f.rule.Key, pathCompletions, nil, body)
	if err != nil {
		t.Fatal(err)
	}
	if !e.Steps[0].Hit || e.Prefill != e.Steps[0].Choice {
		t.Fatalf("after a request the pin should explain as a Tier 0 hit: %+v", e.Steps)
	}
	if _, err := f.rt.Explain(context.Background(), spec.Key{Port: 1}, pathCompletions, nil, body); err == nil {
		t.Error("unknown key explained")
	}
}

// TestCHWBLSingle: sel 8 keeps one prompt on one engine and counts its
// picks by key kind.
func TestCHWBLSingle(t *testing.T) {
	m := metrics.New()
	rt := NewWithMetrics(testOptions(), m, nil)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Close(ctx)
	})
	eps := fakeEndpoints(t, "e", 3)
	r := newRule("127.0.0.1", freePort(t), spec.SelCHWBL, eps...)
	r.CHWBL = &spec.CHWBL{PrefixHashLevel: 1, MeanLoadFactor: 175, Replication: 100}
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	c := testClient()
	homes := map[string]int{}
	for i := range 6 {
		res := post(t, c, ruleURL(r)+pathCompletions, `{"model":"fake-model","prompt":"the same long system prompt","max_tokens":2}`)
		if res.status != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, res.status, res.body)
		}
		homes[res.header.Get(fakeengine.HeaderEngine)]++
	}
	if len(homes) != 1 {
		t.Fatalf("one prompt spread over %v", homes)
	}
	waitCounter(t, m.Registry, "infergate_chwbl_picks_total", map[string]string{"source": "prefix"}, 6)
	e, err := rt.Explain(context.Background(), r.Key, pathCompletions, nil, []byte(`{"model":"fake-model","prompt":"the same long system prompt"}`))
	if err != nil {
		t.Fatal(err)
	}
	for home := range homes {
		if got := e.Endpoint; got == "" {
			t.Errorf("explain gave no CHWBL choice (home %s): %+v", home, e)
		}
	}
}

// TestPDPrefixAffinity: on a cache-aware rule a repeated prompt (no session
// key) goes back to the prefill that served it, through Tier 1.
func TestPDPrefixAffinity(t *testing.T) {
	f := newPDFleet(t, pdTestOptions(), spec.EngineVLLM, 2, 1, func(r *spec.Rule) { r.PD.CacheAware = true })
	c := testClient()
	prompt := `,"suffix":"` + strings.Repeat("x", 8) + `"`
	long := strings.Replace(pdBody(pathCompletions, false, prompt), "hello there", strings.Repeat("a long shared system prompt ", 40), 1)
	for i := range 4 {
		if res := post(t, c, f.url(pathCompletions), long); res.status != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, res.status, res.body)
		}
	}
	pre, _ := f.legCounts()
	if !(pre[0] == 4 && pre[1] == 0 || pre[0] == 0 && pre[1] == 4) {
		t.Fatalf("prompt spread over prefills %v; Tier 1 should keep it home", pre)
	}
	waitCounter(t, f.reg, "infergate_ladder_decisions_total", map[string]string{"tier": "tier1_prefix", "outcome": "hit"}, 3)
	waitCounter(t, f.reg, "loxilb_pd_trie_match_rate", nil, 4)
}

// TestKVExactWired: kvExactMode 3 (single pool) and 1 (P/D prefills) get a
// KV plane entry per eligible endpoint; with no events yet the KV tier
// falls through, the rule's own choice serves, and Explain shows why.
func TestKVExactWired(t *testing.T) {
	t.Run("mode 3 single pool", func(t *testing.T) {
		rt, _ := newTestRuntime(t, testOptions())
		e1, e2 := startEngine(t, "k1"), startEngine(t, "k2")
		r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e1.Addr(), 1), epFor(t, e2.Addr(), 1))
		r.Engine = spec.EngineVLLM
		r.KV = &spec.KV{Mode: 3, ZMQPort: freePort(t), BlockSize: 16, DPRanks: 1}
		if err := rt.Install(nil, r); err != nil {
			t.Fatal(err)
		}
		rows := rt.KVPlane().KVInventory()
		if len(rows) != 2 {
			t.Fatalf("inventory rows %+v, want one per endpoint", rows)
		}
		homes := map[string]bool{}
		for range 4 {
			res := post(t, testClient(), ruleURL(r)+pathCompletions, completionBody)
			if res.status != http.StatusOK {
				t.Fatalf("%d %s", res.status, res.body)
			}
			homes[res.header.Get(fakeengine.HeaderEngine)] = true
		}
		if len(homes) != 2 {
			t.Errorf("a KV miss must keep sel 0 round-robin; served by %v", homes)
		}
		e, err := rt.Explain(context.Background(), r.Key, pathCompletions, nil, []byte(completionBody))
		if err != nil {
			t.Fatal(err)
		}
		if len(e.Steps) == 0 || e.Steps[0].Tier != "tier1_5_kv_exact" || e.Steps[0].Hit || e.KVReason == "" {
			t.Fatalf("explain: %+v", e)
		}
		rt.Remove(r)
		if rows := rt.KVPlane().KVInventory(); len(rows) != 0 {
			t.Errorf("rows after Remove: %+v", rows)
		}
	})
	t.Run("mode 1 P/D", func(t *testing.T) {
		f := newPDFleet(t, pdTestOptions(), spec.EngineVLLM, 2, 1, func(r *spec.Rule) {
			r.KV = &spec.KV{Mode: 1, ZMQPort: 45557, BlockSize: 16, DPRanks: 1}
		})
		if rows := f.rt.KVPlane().KVInventory(); len(rows) != 2 {
			t.Fatalf("inventory rows %+v, want the two prefills", rows)
		}
		if res := post(t, testClient(), f.url(pathCompletions), pdBody(pathCompletions, false, "")); res.status != http.StatusOK {
			t.Fatalf("%d %s", res.status, res.body)
		}
		waitCounter(t, f.reg, "infergate_ladder_decisions_total", map[string]string{"tier": "tier1_5_kv_exact", "outcome": "miss"}, 1)
	})
}

// TestPDBreakerPrefill5xxStreak: a prefill answering 5xx keeps clients
// served (vLLM recomputes on decode) and opens its breaker after the
// streak; the rule then reports it.
func TestPDBreakerPrefill5xxStreak(t *testing.T) {
	o := pdTestOptions()
	o.Breaker5xxStreak = 0 // disabled for single pools: P/D still trips
	o.BreakerOpenFor = time.Minute
	f := newPDFleet(t, o, spec.EngineVLLM, 1, 1)
	f.prefills[0].Inject(pdfake.Fault500, o.BreakerPD5xxStreak)
	c := testClient()
	id := f.prefills[0].Endpoint().ID
	for i := range o.BreakerPD5xxStreak {
		if res := post(t, c, f.url(pathCompletions), pdBody(pathCompletions, false, "")); res.status != http.StatusOK {
			t.Fatalf("request %d: %d %s (decode should recompute)", i, res.status, res.body)
		}
	}
	waitFor(t, 5*time.Second, "prefill breaker open", func() bool {
		st, _ := f.rt.Status(f.rule.Key)
		return st.Endpoints[id].Breaker == "open"
	})
	st, _ := f.rt.Status(f.rule.Key)
	if st.Ready || st.Reason != "no usable prefill endpoint" {
		t.Errorf("status with the only prefill open: %+v", st)
	}
	res := post(t, c, f.url(pathCompletions), pdBody(pathCompletions, false, ""))
	if res.status != http.StatusServiceUnavailable || errorCode(t, res.body) != CodePoolUnavailable {
		t.Errorf("open prefill, no role 0: %d %s", res.status, res.body)
	}
}

// TestPDConcurrentLoadAccounting: concurrent requests all succeed, spread
// over both pairs, and every endpoint's load returns to zero.
func TestPDConcurrentLoadAccounting(t *testing.T) {
	for _, engine := range []spec.Engine{spec.EngineVLLM, spec.EngineSGLang} {
		t.Run(string(engine), func(t *testing.T) {
			f := newPDFleet(t, pdTestOptions(), engine, 2, 2)
			c := testClient()
			const workers, each = 8, 4
			errs := make(chan string, workers*each)
			done := make(chan struct{})
			for w := range workers {
				go func() {
					defer func() { done <- struct{}{} }()
					for i := range each {
						req, _ := http.NewRequest(http.MethodPost, f.url(pathChatCompletions),
							strings.NewReader(pdBody(pathChatCompletions, i%2 == 0, "")))
						resp, err := c.Do(req)
						if err != nil {
							errs <- err.Error()
							continue
						}
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode != http.StatusOK {
							errs <- fmt.Sprintf("worker %d: status %d", w, resp.StatusCode)
						}
					}
				}()
			}
			for range workers {
				<-done
			}
			close(errs)
			for e := range errs {
				t.Error(e)
			}
			pre, dec := f.legCounts()
			for i, n := range append(pre, dec...) {
				if n == 0 {
					t.Errorf("endpoint %d got no leg (prefills %v decodes %v)", i, pre, dec)
				}
			}
			waitFor(t, 5*time.Second, "loads back to 0", func() bool {
				c := f.rt.rules[f.rule.Key].cur.Load()
				for _, ep := range c.eps {
					if ep.active.Load() != 0 {
						return false
					}
				}
				return true
			})
		})
	}
}

// TestPDRequestsModelLabel: loxilb_ai_pd_requests_total
// carries the request's model when the rule pins none, with bounded
// cardinality: models the engines served are learned up to a cap, the rest
// count as "other".
func TestPDRequestsModelLabel(t *testing.T) {
	f := newPDFleet(t, pdTestOptions(), spec.EngineVLLM, 1, 1)
	c := testClient()
	for range 2 {
		if res := post(t, c, f.url(pathCompletions), pdBody(pathCompletions, false, "")); res.status != http.StatusOK {
			t.Fatalf("%d %s", res.status, res.body)
		}
	}
	waitCounter(t, f.reg, "loxilb_ai_pd_requests_total", map[string]string{"model": "fake-model", "status": "success"}, 2)
	const invented = pd.DefaultMaxModelLabels + 4
	for i := range invented {
		body := fmt.Sprintf(`{"model":"m%d","prompt":"hello there","max_tokens":3}`, i)
		if res := post(t, c, f.url(pathCompletions), body); res.status != http.StatusOK {
			t.Fatalf("%d %s", res.status, res.body)
		}
	}
	waitCounter(t, f.reg, "loxilb_ai_pd_requests_total", nil, 2+invented)
	fams, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]bool{}
	for _, fam := range fams {
		if fam.GetName() != "loxilb_ai_pd_requests_total" {
			continue
		}
		for _, m := range fam.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "model" {
					labels[l.GetValue()] = true
				}
			}
		}
	}
	if labels[""] || !labels[pd.ModelOther] || len(labels) != pd.DefaultMaxModelLabels+1 {
		t.Fatalf("model labels %v: want the %d learned models and %q, never empty", labels, pd.DefaultMaxModelLabels, pd.ModelOther)
	}
}

// TestChargedEndpoint: a P/D request is charged to the decode that
// answered; when no decode leg answered for it (a refused handoff, a failed
// prefill, a TensorRT-LLM early exit, an SGLang decode cancelled because
// its prefill failed) to the engine that decided the answer, not to the
// decode the ladder chose.
func TestChargedEndpoint(t *testing.T) {
	c := &compiled{eps: []*endpoint{{id: "p1"}, {id: "p2"}, {id: "d1"}, {id: "d2"}}}
	leg := func(p pd.Phase, id string) pd.LegResult {
		return pd.LegResult{Phase: p, Endpoint: spec.Endpoint{ID: id}}
	}
	refused := pd.LegResult{Phase: pd.PhasePrefill, Endpoint: spec.Endpoint{ID: "p1"}, Status: 400}
	cancelled := pd.LegResult{Phase: pd.PhaseDecode, Endpoint: spec.Endpoint{ID: "d1"}, Cancelled: true}
	prefillGone := pd.LegResult{Phase: pd.PhasePrefill, Endpoint: spec.Endpoint{ID: "p1"}, Cancelled: true}
	prefillGone2 := pd.LegResult{Phase: pd.PhasePrefill, Endpoint: spec.Endpoint{ID: "p2"}, Cancelled: true}
	const chosen = 2 // d1
	for _, tc := range []struct {
		name   string
		legs   []pd.LegResult
		failed pd.Phase
		want   int
		gone   bool // the client left (clientGone)
	}{
		{"both legs", []pd.LegResult{leg(pd.PhasePrefill, "p1"), leg(pd.PhaseDecode, "d1")}, "", 2, false},
		{"decode failover", []pd.LegResult{leg(pd.PhasePrefill, "p1"), leg(pd.PhaseDecode, "d1"), leg(pd.PhaseDecode, "d2")}, "", 3, false},
		{"handoff refused", []pd.LegResult{leg(pd.PhasePrefill, "p1")}, pd.PhasePrefill, 0, false},
		{"prefill retried elsewhere, then refused", []pd.LegResult{leg(pd.PhasePrefill, "p1"), leg(pd.PhasePrefill, "p2")}, pd.PhasePrefill, 1, false},
		{"sglang prefill refused, decode cancelled", []pd.LegResult{refused, cancelled}, pd.PhasePrefill, 0, false},
		{"sglang pair retried, second prefill failed", []pd.LegResult{leg(pd.PhasePrefill, "p1"), cancelled, leg(pd.PhasePrefill, "p2"), cancelled}, pd.PhasePrefill, 1, false},
		{"sglang prefill refused after the decode answered", []pd.LegResult{refused, leg(pd.PhaseDecode, "d1")}, pd.PhasePrefill, 2, false},
		{"decode cancelled with the client gone", []pd.LegResult{leg(pd.PhasePrefill, "p1"), cancelled}, pd.PhaseDecode, 2, true},
		// vLLM and TensorRT-LLM send no decode before their prefill ends:
		// a client that leaves during the prefill cancels only the prefill,
		// which is the engine the request reached.
		{"prefill cancelled with the client gone", []pd.LegResult{prefillGone}, pd.PhasePrefill, 0, true},
		{"prefill retried elsewhere, then the client left", []pd.LegResult{leg(pd.PhasePrefill, "p1"), prefillGone2}, pd.PhasePrefill, 1, true},
		// MoRI-IO sends its decode beside the prefill: a client that leaves
		// during the prefill cancels both, and the decode it reached is
		// charged as before; its sibling did not cancel it.
		{"moriio: the client left during the concurrent prefill", []pd.LegResult{prefillGone, cancelled}, pd.PhasePrefill, 2, true},
		{"no leg", nil, "", chosen, false},
		{"decode unknown to the rule", []pd.LegResult{leg(pd.PhasePrefill, "p1"), leg(pd.PhaseDecode, "gone")}, "", chosen, false},
	} {
		o := pd.Outcome{Legs: tc.legs, FailedPhase: tc.failed, ClientGone: tc.gone}
		if got := c.chargedEndpoint(&o, chosen); got != tc.want {
			t.Errorf("%s: charged %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestPrefillTeaches: only a clean prefill's time teaches the cost model.
func TestPrefillTeaches(t *testing.T) {
	ok := pd.Outcome{Status: 200, Prefill: 80 * time.Millisecond}
	for _, tc := range []struct {
		name string
		mod  func(*pd.Outcome)
		want bool
	}{
		{"clean", func(*pd.Outcome) {}, true},
		{"gateway error", func(o *pd.Outcome) { o.Code, o.Status = pd.CodeHandoffInvalid, 502 }, false},
		{"engine refusal relayed", func(o *pd.Outcome) { o.Status, o.Relayed = 400, true }, false},
		{"relayed with 200", func(o *pd.Outcome) { o.Relayed = true }, false},
		{"prefill failover", func(o *pd.Outcome) { o.PrefillFailover = true }, false},
		{"transfer failed", func(o *pd.Outcome) { o.KVTransferFailed = true }, false},
		{"prefill skipped", func(o *pd.Outcome) { o.PrefillSkipped, o.Prefill = "n_gt_1", 0 }, false},
		{"no prefill time", func(o *pd.Outcome) { o.Prefill = 0 }, false},
	} {
		o := ok
		tc.mod(&o)
		if got := prefillTeaches(&o); got != tc.want {
			t.Errorf("%s: prefillTeaches = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestPDSGLangRefusalCharged: SGLang sends both legs at once; when the
// prefill refuses (a 4xx the gateway relays) the decode, still waiting in
// its bootstrap room, is cancelled without an answer. The request is
// charged to the prefill that decided it, not to that decode.
func TestPDSGLangRefusalCharged(t *testing.T) {
	f := newPDFleet(t, pdTestOptions(), spec.EngineSGLang, 1, 1)
	f.prefills[0].Inject(pdfake.Fault400, 1)
	res := post(t, testClient(), f.url(pathCompletions), pdBody(pathCompletions, false, ""))
	if res.status != http.StatusBadRequest {
		t.Fatalf("status %d %s, want the prefill's 400 relayed", res.status, res.body)
	}
	name := "infergate_datapath_requests_total"
	waitCounter(t, f.reg, name, map[string]string{"endpoint": f.prefills[0].Endpoint().ID, "code": "400"}, 1)
	if got := counterSum(t, f.reg, name, map[string]string{"endpoint": f.decodes[0].Endpoint().ID}); got != 0 {
		t.Errorf("%s{endpoint=decode} = %v: the cancelled decode was charged", name, got)
	}
}
