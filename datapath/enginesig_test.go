package datapath

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/enginestats"
	"github.com/infergate/infergate/spec"
)

// engineOptions scrape fast so the tests see signals quickly.
func engineOptions() Options {
	o := testOptions()
	o.Engine = enginestats.Options{Interval: 10 * time.Millisecond, Timeout: 100 * time.Millisecond, StaleAfter: 500 * time.Millisecond}
	return o
}

// metricsEngine is a loopback engine: completions answer 200, path serves
// the exposition (nil: 404, as an engine that exports nothing; hang: never
// answers).
func metricsEngine(t *testing.T, path string, exposition []byte, hang bool) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPost:
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"id":"x","object":"text_completion","choices":[{"text":"ok"}]}`))
		case r.URL.Path == path && hang:
			<-r.Context().Done()
		case r.URL.Path == path && exposition != nil:
			_, _ = w.Write(exposition)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func srvAddr(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }

// TestEngineSignalsVisible: one rule per engine over real loopback engines
// exporting that engine's format (and one that exports nothing): the
// signals reach /status, explain and the candidates pickers get, and
// requests are served as before.
func TestEngineSignalsVisible(t *testing.T) {
	tests := []struct {
		engine           spec.Engine
		fixture          string
		waiting, running int
		kv               float64
	}{
		{spec.EngineVLLM, "vllm-0.10.txt", 5, 16, 0.83},
		{spec.EngineSGLang, "sglang-0.5.txt", 17, 11, 0.97},
		{spec.EngineTRTLLM, "trtllm-1.2.txt", 6, 32, 0.5546875},
	}
	for _, tt := range tests {
		t.Run(string(tt.engine), func(t *testing.T) {
			body, err := os.ReadFile("../enginestats/testdata/" + tt.fixture)
			if err != nil {
				t.Fatal(err)
			}
			rt, _ := newTestRuntime(t, engineOptions())
			path := enginestats.DialectFor(string(tt.engine)).Path
			busy := metricsEngine(t, path, body, false)
			silent := metricsEngine(t, path, nil, false)
			r := newRule("127.0.0.1", freePort(t), spec.SelLeastConn, epFor(t, srvAddr(busy), 1), epFor(t, srvAddr(silent), 1))
			r.Engine, r.EngineMetricsPath = tt.engine, path
			r.KV = &spec.KV{Mode: 3, ZMQPort: freePort(t), BlockSize: 16, DPRanks: 1}
			if err := rt.Install(nil, r); err != nil {
				t.Fatal(err)
			}
			busyID, silentID := r.Endpoints[0].ID, r.Endpoints[1].ID
			var st spec.RuleStatus
			waitFor(t, 5*time.Second, "a valid signal in /status", func() bool {
				st, _ = rt.Status(r.Key)
				es := st.Endpoints[busyID].Engine
				return es != nil && es.Valid && st.Endpoints[silentID].Engine != nil
			})
			es := st.Endpoints[busyID].Engine
			if es.Waiting != tt.waiting || es.Running != tt.running || es.KVUsage != tt.kv || es.Result != enginestats.ReasonOK || es.AgeSec < 0 {
				t.Errorf("busy engine status %+v", es)
			}
			if s := st.Endpoints[silentID].Engine; s.Valid || s.Result != enginestats.ReasonStatus {
				t.Errorf("engine without metrics: %+v, want not valid, http_status", s)
			}

			ex, err := rt.Explain(context.Background(), r.Key, "/v1/completions", nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := ex.Candidates[0].Engine; !strings.HasPrefix(got, "waiting=") {
				t.Errorf("explain busy candidate engine = %q", got)
			}
			if got := ex.Candidates[1].Engine; !strings.HasPrefix(got, "ignored:http_status") {
				t.Errorf("explain silent candidate engine = %q", got)
			}

			var now int64
			rs := rt.rules[r.Key]
			cands := rs.cur.Load().kvCandidates(0, &now)
			if len(cands) != 2 {
				t.Fatalf("candidates %+v", cands)
			}
			if e := cands[0].Engine; !e.Valid || e.Waiting != tt.waiting || e.Running != tt.running || e.KVUsage != tt.kv || e.Age < 0 {
				t.Errorf("candidate engine load %+v", e)
			}
			if cands[1].Engine.Valid {
				t.Errorf("silent candidate has a valid signal: %+v", cands[1].Engine)
			}

			if res := post(t, testClient(), ruleURL(r)+"/v1/completions", completionBody); res.status != 200 {
				t.Fatalf("request: %d %s", res.status, res.body)
			}
		})
	}
}

// TestEngineSignalsPD: P/D candidates carry the signal too.
func TestEngineSignalsPD(t *testing.T) {
	body, err := os.ReadFile("../enginestats/testdata/vllm-0.10.txt")
	if err != nil {
		t.Fatal(err)
	}
	rt, _ := newTestRuntime(t, engineOptions())
	pre, dec := metricsEngine(t, "/metrics", body, false), metricsEngine(t, "/metrics", nil, false)
	p, d := epFor(t, srvAddr(pre), 1), epFor(t, srvAddr(dec), 1)
	p.Role, d.Role = spec.RolePrefill, spec.RoleDecode
	r := newRule("127.0.0.1", freePort(t), spec.SelLeastConn, p, d)
	r.Engine, r.EngineMetricsPath = spec.EngineVLLM, "/metrics"
	r.PD = &spec.PD{SessionTTL: time.Minute, CacheThreshold: 20, BalanceAbsThreshold: 3}
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	rs := rt.rules[r.Key]
	waitFor(t, 5*time.Second, "the prefill's signal", func() bool {
		pf, _ := rs.cur.Load().pdCandidates(0)
		return len(pf) == 1 && pf[0].Engine.Valid
	})
	pf, dc := rs.cur.Load().pdCandidates(0)
	if pf[0].Engine.Waiting != 5 || pf[0].Engine.Running != 16 || len(dc) != 1 || dc[0].Engine.Valid {
		t.Errorf("prefill %+v decode %+v", pf[0].Engine, dc)
	}
}

// TestEngineSignalsFollowRules: the scrape targets follow installs,
// updates (path off and back, endpoints changed) and removal.
func TestEngineSignalsFollowRules(t *testing.T) {
	rt, _ := newTestRuntime(t, engineOptions())
	a, b := metricsEngine(t, "/metrics", nil, false), metricsEngine(t, "/metrics", nil, false)
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, srvAddr(a), 1), epFor(t, srvAddr(b), 1))
	r.EngineMetricsPath = "/metrics"
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	if n := rt.es.Targets(); n != 2 {
		t.Fatalf("targets after install = %d, want 2", n)
	}
	off := *r
	off.Generation, off.EngineMetricsPath = 2, ""
	if err := rt.Install(r, &off); err != nil {
		t.Fatal(err)
	}
	if n := rt.es.Targets(); n != 0 {
		t.Fatalf("targets with engine_metrics_path none = %d, want 0", n)
	}
	one := *r
	one.Generation, one.Endpoints = 3, r.Endpoints[:1]
	if err := rt.Install(&off, &one); err != nil {
		t.Fatal(err)
	}
	if n := rt.es.Targets(); n != 1 {
		t.Fatalf("targets after dropping an endpoint = %d, want 1", n)
	}
	rt.Remove(&one)
	if n := rt.es.Targets(); n != 0 {
		t.Fatalf("targets after remove = %d, want 0", n)
	}
}

// TestEngineScrapeNeverStallsRequests: an engine whose metrics port hangs
// serves requests at normal speed; its signal is reported as a timeout.
func TestEngineScrapeNeverStallsRequests(t *testing.T) {
	rt, _ := newTestRuntime(t, engineOptions())
	e := metricsEngine(t, "/metrics", nil, true)
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, srvAddr(e), 1))
	r.EngineMetricsPath = "/metrics"
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	c := testClient()
	for range 20 {
		start := time.Now()
		if res := post(t, c, ruleURL(r)+"/v1/completions", completionBody); res.status != 200 {
			t.Fatalf("request: %d %s", res.status, res.body)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("a request took %v while the metrics port hangs", d)
		}
	}
	waitFor(t, 5*time.Second, "the timeout in /status", func() bool {
		st, _ := rt.Status(r.Key)
		es := st.Endpoints[r.Endpoints[0].ID].Engine
		return es != nil && es.Result == enginestats.ReasonTimeout && !es.Valid
	})
}
