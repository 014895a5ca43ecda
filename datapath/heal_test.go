package datapath

import (
	"net/http"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/pdfake"
	"github.com/infergate/infergate/spec"
)

func TestProbeEndsOpenWindow(t *testing.T) {
	tests := []struct {
		name     string
		cause    openCause
		cameBack bool
		want     bool
	}{
		{"connect failures, probe passes", openedByConnect, false, true},
		{"connect failures, endpoint back from down", openedByConnect, true, true},
		{"5xx streak, probe passes while up", openedBy5xx, false, false},
		{"5xx streak, endpoint back from down (restart)", openedBy5xx, true, true},
	}
	for _, tc := range tests {
		if got := probeEndsOpenWindow(tc.cause, tc.cameBack); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestBreakerOnProbePass(t *testing.T) {
	cfg := &breakerConfig{enabled: true, connectFails: 1, streak5xx: 1, openFor: time.Hour}
	var b breaker
	if b.onProbePass(true) {
		t.Fatal("a closed breaker has no window to end")
	}
	b.onDialFailure(cfg)
	var now int64
	if b.selectable(&now) {
		t.Fatal("just opened, selectable")
	}
	if !b.onProbePass(false) {
		t.Fatal("a passing probe did not end a connect-failure window")
	}
	now = 0
	if ok, to := b.admit(); !ok || to != breakerHalfOpen {
		t.Fatalf("admit after the probe = %v %d, want the half-open trial", ok, to)
	}
	b.onResponse(cfg, http.StatusInternalServerError) // the trial fails with a 5xx: reopen
	if b.onProbePass(false) {
		t.Error("a probe pass while up ended a 5xx window")
	}
	if !b.onProbePass(true) {
		t.Error("an endpoint back from down did not end a 5xx window")
	}
}

// TestPDRestartedPrefillHealsOnProbe: 1P1D vLLM, the prefill dies (its
// breaker opens on connect failures, probes mark it down) and comes back on
// the same address. With a one-hour breaker window, traffic must return as
// soon as the probe sees the engine healthy: the probe's pass ends the open
// window and the next request is the half-open trial.
func TestPDRestartedPrefillHealsOnProbe(t *testing.T) {
	o := pdTestOptions()
	o.BreakerOpenFor = time.Hour // waiting it out would fail the test
	f := newPDFleet(t, o, spec.EngineVLLM, 1, 1, func(r *spec.Rule) {
		r.Probe = spec.Probe{Type: "http", Request: "/health", Timeout: time.Second, Retries: 1}
	})
	pre := f.prefills[0]
	id := pre.Endpoint().ID
	c := testClient()
	waitFor(t, 5*time.Second, "rule ready", func() bool { st, _ := f.rt.Status(f.rule.Key); return st.Ready })

	_ = pre.Close()
	breaker := func() string { st, _ := f.rt.Status(f.rule.Key); return st.Endpoints[id].Breaker }
	for i := 0; i < 20 && breaker() != "open"; i++ {
		post(t, c, f.url(pathCompletions), pdBody(pathCompletions, false, ""))
	}
	if breaker() != "open" {
		t.Skip("the probe marked the prefill down before the breaker opened; nothing to heal")
	}
	res := post(t, c, f.url(pathCompletions), pdBody(pathCompletions, false, ""))
	if res.status != http.StatusServiceUnavailable {
		t.Fatalf("dead prefill, no role 0: got %d %s, want 503", res.status, res.body)
	}

	cfg := pdfake.DefaultConfig(pdfake.VLLM, pdfake.Prefill)
	cfg.Addr = pre.AddrPort().String()
	back, err := pdfake.Start(cfg)
	if err != nil {
		t.Fatalf("restart on %s: %v", cfg.Addr, err)
	}
	t.Cleanup(func() { _ = back.Close() })
	waitFor(t, 10*time.Second, "traffic back on the restarted prefill", func() bool {
		res := post(t, c, f.url(pathCompletions), pdBody(pathCompletions, false, ""))
		return res.status == http.StatusOK && len(back.Records()) > 0
	})
	// The client has its answer before the datapath feeds the breaker.
	waitFor(t, 5*time.Second, "breaker closed by the trial", func() bool { return breaker() == "closed" })
}

// TestPDDeadDecodeFailsOver: 1P2D with one decode refusing connections.
// Every request is served: a decode leg that could not connect is re-sent
// to the live decode (same prefill result) until the dead one's breaker
// opens, instead of answering 503 pd_pool_unavailable.
func TestPDDeadDecodeFailsOver(t *testing.T) {
	for _, engine := range []spec.Engine{spec.EngineVLLM, spec.EngineSGLang, spec.EngineTRTLLM} {
		t.Run(string(engine), func(t *testing.T) {
			o := pdTestOptions()
			o.BreakerOpenFor = time.Hour
			f := newPDFleet(t, o, engine, 1, 2)
			dead := f.decodes[0]
			id := dead.Endpoint().ID
			_ = dead.Close()
			c := testClient()
			for i := range 8 {
				res := post(t, c, f.url(pathCompletions), pdBody(pathCompletions, i%2 == 0, ""))
				if res.status != http.StatusOK {
					t.Fatalf("request %d: %d %s; want the live decode to serve", i, res.status, res.body)
				}
			}
			waitFor(t, 5*time.Second, "a decode failover counted", func() bool {
				return counterSum(t, f.reg, "infergate_pd_decode_failovers_total", nil) >= 1
			})
			// Connect failures still feed the dead decode's breaker (after each
			// client has its answer, hence the wait).
			waitFor(t, 5*time.Second, "dead decode breaker open", func() bool {
				st, _ := f.rt.Status(f.rule.Key)
				return st.Endpoints[id].Breaker == "open"
			})
			if got := counterSum(t, f.reg, "infergate_datapath_requests_total", map[string]string{"endpoint": id}); got != 0 {
				t.Errorf("requests counted on the dead decode: %v", got)
			}
			// Bytes and requests (the endpoint "counter") go to the decode
			// that served, never to the one that could not be reached.
			// (Counted after each client has its answer, hence the wait.)
			liveID := f.decodes[1].Endpoint().ID
			waitFor(t, 5*time.Second, "all 8 requests on the live decode", func() bool {
				st, _ := f.rt.Status(f.rule.Key)
				return st.Endpoints[liveID].Requests == 8
			})
			st, _ := f.rt.Status(f.rule.Key)
			if es := st.Endpoints[id]; es.Bytes != 0 || es.Requests != 0 {
				t.Errorf("dead decode counter = %d:%d, want 0:0", es.Requests, es.Bytes)
			}
			if live := st.Endpoints[liveID]; live.Bytes == 0 {
				t.Errorf("live decode counter = %d:%d, want its bytes", live.Requests, live.Bytes)
			}
		})
	}
}
