package datapath

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/enginestats"
	"github.com/infergate/infergate/internal/pdfake"
	"github.com/infergate/infergate/spec"
)

// learnedPDRule starts a vLLM P/D fleet (one prefill, two decodes) whose
// engines report batch limit limit on their dev-mode /server_info, and a
// rule over it with mod applied.
func learnedPDRule(t *testing.T, ip int, limit int, mod func(*spec.Rule)) (*spec.Rule, []*pdfake.Engine) {
	t.Helper()
	var engines []*pdfake.Engine
	var eps []spec.Endpoint
	for i, role := range []pdfake.Role{pdfake.Prefill, pdfake.Decode, pdfake.Decode} {
		cfg := pdfake.DefaultConfig(pdfake.VLLM, role)
		cfg.Addr = fmt.Sprintf("127.0.0.%d:0", ip+i)
		cfg.StreamChunks = 4
		cfg.ChunkDelay = 20 * time.Millisecond
		cfg.MaxRunningRequests = limit
		e, err := pdfake.Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		engines = append(engines, e)
		eps = append(eps, e.Endpoint())
	}
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, eps...)
	r.Name = fmt.Sprintf("pd-learned-%d", ip)
	r.Engine = spec.EngineVLLM
	r.PD = &spec.PD{SessionTTL: time.Minute, BalanceAbsThreshold: 3, CacheThreshold: 20}
	if mod != nil {
		mod(r)
	}
	return r, engines
}

// windowsOf is each endpoint's window view in rt's current generation of r.
func windowsOf(rt *Runtime, r *spec.Rule) []*spec.WindowStatus {
	rt.mu.Lock()
	c := rt.rules[r.Key].cur.Load()
	rt.mu.Unlock()
	out := make([]*spec.WindowStatus, len(c.eps))
	for i := range c.eps {
		out[i] = c.windowStatus(i)
	}
	return out
}

// waitWindows polls until the decodes' windows are limit (learned from
// source), failing after a few seconds.
func waitWindows(t *testing.T, rt *Runtime, r *spec.Rule, limit int, source string) []*spec.WindowStatus {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ws := windowsOf(rt, r)
		if ws[1] != nil && ws[2] != nil && ws[1].Limit == limit && ws[2].Limit == limit &&
			ws[1].Source == source && ws[2].Source == source {
			return ws
		}
		if time.Now().After(deadline) {
			t.Fatalf("decode windows %s / %s, want limit %d from %q", ws[1].Summary(), ws[2].Summary(), limit, source)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLearnedDecodeWindow: with LearnWindows on, a P/D rule without an
// admission_window bounds each decode at the batch limit its engine
// reports (vLLM's dev-mode /server_info, served by the fake), shows where
// the window came from, and follows the engine when it restarts with
// another limit. With learning off the same fleet gets no window at all.
func TestLearnedDecodeWindow(t *testing.T) {
	for _, learn := range []bool{true, false} {
		t.Run(fmt.Sprintf("learn=%v", learn), func(t *testing.T) {
			ip := 40
			if !learn {
				ip = 50
			}
			r, engines := learnedPDRule(t, ip, 1, nil)
			o := pdTestOptions()
			o.Flow.MaxWait = 20 * time.Second
			o.Engine.LearnWindows = learn
			o.Engine.ModelsRefresh = 50 * time.Millisecond
			rt, m := installWithMetrics(t, o, r)
			if !learn {
				time.Sleep(200 * time.Millisecond) // several refreshes, had they run
				for i, w := range windowsOf(rt, r) {
					if w != nil {
						t.Fatalf("endpoint %d has window %s with learning off", i, w.Summary())
					}
				}
				return
			}
			ws := waitWindows(t, rt, r, 1, enginestats.SourceVLLM)
			if ws[0] != nil {
				t.Fatalf("the prefill learned a window (%s): a P/D prefill takes only its own", ws[0].Summary())
			}
			if got := ws[1].Summary(); got != "0/1,from="+enginestats.SourceVLLM || ws[1].EngineLimit != 1 {
				t.Fatalf("decode window %q (engine limit %d)", got, ws[1].EngineLimit)
			}

			ok, peak := servePDPeak(t, rt, r, 6)
			if ok != 6 || peak > 1 {
				t.Fatalf("%d of 6 served; a decode held %d at once, learned window 1", ok, peak)
			}
			if q := metricValue(t, m.Flow.Requests.WithLabelValues(r.Name, "standard", flowQueued)); q == 0 {
				t.Fatal("no request waited: the learned windows were not in the way")
			}

			// The engines restart with another limit: the windows follow.
			for _, e := range engines {
				e.SetMaxRunningRequests(3)
			}
			waitWindows(t, rt, r, 3, enginestats.SourceVLLM)
			// Then stop telling it: the last limit stays, with the reason.
			for _, e := range engines {
				e.SetMaxRunningRequests(0)
			}
			deadline := time.Now().Add(5 * time.Second)
			for {
				w := windowsOf(rt, r)[1]
				if w.Limit == 3 && strings.Contains(w.LearnError, "404") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after the engine stopped telling: %+v", w)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// TestLearnedWindowRules: a configured window always wins over the
// engine's; an endpoint's own window wins for it alone; the gateway's
// share divides the engine's limit (rounded up).
func TestLearnedWindowRules(t *testing.T) {
	tests := []struct {
		name   string
		ip     int
		engine int
		share  float64
		mod    func(*spec.Rule)
		want   [3]string // each endpoint's window summary
	}{
		{"rule window wins", 60, 8, 1, func(r *spec.Rule) { r.AdmissionWindow = 2 }, [3]string{"", "0/2", "0/2"}},
		{"endpoint window wins for it", 63, 8, 1, func(r *spec.Rule) { r.Endpoints[2].Window = 5 }, [3]string{"", "0/8,from=vllm_server_info", "0/5"}},
		{"prefill's own window stays", 66, 8, 1, func(r *spec.Rule) { r.Endpoints[0].Window = 4 }, [3]string{"0/4", "0/8,from=vllm_server_info", "0/8,from=vllm_server_info"}},
		{"half share, rounded up", 69, 5, 0.5, nil, [3]string{"", "0/3,from=vllm_server_info", "0/3,from=vllm_server_info"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := learnedPDRule(t, tc.ip, tc.engine, tc.mod)
			o := pdTestOptions()
			o.Engine.LearnWindows = true
			o.Engine.WindowShare = tc.share
			o.Engine.ModelsRefresh = 50 * time.Millisecond
			rt, _ := installWithMetrics(t, o, r)
			deadline := time.Now().Add(5 * time.Second)
			for {
				ws := windowsOf(rt, r)
				got := [3]string{ws[0].Summary(), ws[1].Summary(), ws[2].Summary()}
				if got == tc.want {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("windows %q, want %q", got, tc.want)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// servePDPeak sends n streamed completions at once through P/D rule r (one
// prefill, then decodes) and returns how many were answered 200 and the
// most requests any decode held at once meanwhile.
func servePDPeak(t *testing.T, rt *Runtime, r *spec.Rule, n int) (ok int32, peak int64) {
	t.Helper()
	rt.mu.Lock()
	c := rt.rules[r.Key].cur.Load()
	rt.mu.Unlock()
	var top atomic.Int64
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			for i := 1; i < len(c.eps); i++ { // the decodes
				if n := c.eps[i].active.Load(); n > top.Load() {
					top.Store(n)
				}
			}
			time.Sleep(time.Millisecond)
		}
	})
	client := testClient()
	var wg sync.WaitGroup
	var served atomic.Int32
	for i := range n {
		wg.Go(func() {
			res := post(t, client, ruleURL(r)+"/v1/completions", pdBody("/v1/completions", true, fmt.Sprintf(`,"user":"u%d"`, i)))
			if res.status == http.StatusOK {
				served.Add(1)
			}
		})
	}
	wg.Wait()
	close(stop)
	sampler.Wait()
	return served.Load(), top.Load()
}
