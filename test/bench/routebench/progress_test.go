package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

func TestCutRule(t *testing.T) {
	// A window [2, 5) s; a ramp step judges 10 requests at most (a p90
	// within the SLO allows one late request of 10).
	window := cutRule{From: 2, Until: 5}
	ramp := cutRule{From: 2, Until: 5, SLO: 2, MaxIn: 10}
	for _, c := range []struct {
		name string
		rule cutRule
		now  float64
		reqs []reqProgress
		want bool
	}{
		{"no rule", cutRule{}, 9, nil, false},
		{"window not over", window, 4.9, []reqProgress{{3, 0.1, 4}}, false},
		{"window over, its requests done", window, 5.1, []reqProgress{{3, 0.1, 4}, {4.5, 0.2, 5}}, true},
		{"window over, one still streaming", window, 5.1, []reqProgress{{3, 0.1, 4}, {4.5, 0.2, -1}}, false},
		{"warm-up and later requests do not count", window, 5.1, []reqProgress{{1, 0.1, -1}, {3, 0.1, 4}, {5.2, -1, -1}}, true},
		{"ramp: one late of 10 may still pass", ramp, 4.8, []reqProgress{{2.1, -1, -1}, {2.5, 0.3, -1}}, false},
		{"ramp: two late of 10 fail", ramp, 4.8, []reqProgress{{2.1, -1, -1}, {2.2, 2.5, -1}}, true},
		{"ramp: a request that ended without a token after the SLO is late", ramp, 4.8, []reqProgress{{2.1, -1, 4.5}, {2.2, -1, -1}}, true},
		{"ramp: one that failed fast is not", ramp, 4.8, []reqProgress{{2.1, -1, 2.2}, {2.2, -1, -1}}, false},
		// Requests that started before the window are among MaxIn but
		// cannot be in it: with 8 in the window at most, one late fails.
		{"ramp: the warm-up's requests lower the bound", ramp, 4.8, []reqProgress{{0.5, 0.1, 1}, {1, 0.1, 2}, {2.1, -1, -1}}, true},
		{"ramp: 20 at most, 2 late may pass", cutRule{From: 2, Until: 5, SLO: 2, MaxIn: 20}, 4.8, []reqProgress{{2.1, -1, -1}, {2.2, 3, 4}}, false},
	} {
		if got := c.rule.done(c.now, c.reqs); got != c.want {
			t.Errorf("%s: done %v, want %v", c.name, got, c.want)
		}
	}
}

// sseEngine answers every completion with three streamed tokens after
// firstDelay, counting the requests it got.
func sseEngine(t *testing.T, firstDelay time.Duration, got *atomic.Int32) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		_, _ = io.Copy(io.Discard, r.Body) // then a client that leaves ends r's context
		select {
		case <-time.After(firstDelay):
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for range 3 {
			fmt.Fprintf(w, "data: {\"choices\":[{\"text\":\" a\"}]}\n\n")
			w.(http.Flusher).Flush()
			time.Sleep(20 * time.Millisecond)
		}
		fmt.Fprintf(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestRunnerCuts: a run stops once its window's requests are done (a
// conversation's turn after the window is never sent), and a ramp step
// stops once its verdict is certain, without waiting for the engine.
func TestRunnerCuts(t *testing.T) {
	var got atomic.Int32
	srv := sseEngine(t, 0, &got)
	one := func(at time.Duration) flow { return flow{At: at, Turns: []turn{{Prompt: " hi", MaxTokens: 3}}} }
	conv := one(50 * time.Millisecond)
	conv.Turns = append(conv.Turns, turn{Prompt: " again", MaxTokens: 3, Think: 10 * time.Second})
	rn := &runner{client: newHTTPClient(), model: "m", cut: cutRule{Until: 0.3}}
	began := time.Now()
	res := rn.run(context.Background(), target{VIP: srv.URL}, []flow{one(0), conv})
	if d := time.Since(began); d > 5*time.Second {
		t.Fatalf("the run took %v: it waited for the turn after the window", d)
	}
	if len(res) != 2 || !res[0].ok() || !res[1].ok() || got.Load() != 2 {
		t.Fatalf("%d results (%+v), %d requests sent; want the two in the window, answered", len(res), res, got.Load())
	}

	// Every request waits 30 s for its first token: with an SLO of 0.1 s
	// the step has failed as soon as two of at most two have waited longer.
	var slowGot atomic.Int32
	slow := sseEngine(t, 30*time.Second, &slowGot)
	rn = &runner{client: newHTTPClient(), model: "m", cut: cutRule{Until: 0.2, SLO: 0.1, MaxIn: 2}}
	began = time.Now()
	res = rn.run(context.Background(), target{VIP: slow.URL}, []flow{one(0), one(50 * time.Millisecond)})
	if d := time.Since(began); d > 10*time.Second {
		t.Fatalf("the failed step took %v", d)
	}
	if len(res) != 2 || res[0].TTFT >= 0 || res[1].TTFT >= 0 {
		t.Fatalf("results %+v, want two requests cut before their first token", res)
	}
}
