package pick

import (
	"math"
	"sync/atomic"
	"testing"
	"time"
)

// The backlog share follows what requests placed behind a charged backlog
// really waited: all of it on an engine that computes prefills one after
// another, none on one that prices each prefill on its own tokens, and the
// queue term's part is not the backlog's. Samples without a charged
// backlog, saturated ones and a gateway that does not learn leave it at the
// prior; a backlog sample teaches the per-token and per-request costs
// nothing.
func TestBacklogShareLearn(t *testing.T) {
	ms := time.Millisecond
	// A 100-token uncached tail (55 ms with the overhead) placed behind
	// 500 ms of charged prefill, with a 20 ms queue term.
	est := Estimate{Queue: 20 * ms, Prefill: 55 * ms, Charged: 500 * ms, Backlog: 500 * ms, Uncached: 100, QueueUnits: 0.2}
	for _, tc := range []struct {
		name string
		m    CostModel
		est  Estimate
		ttft time.Duration
		want float64
	}{
		{"one after another keeps the prior", DefaultCostModel(), est, 575 * ms, 1},
		{"side by side learns none", DefaultCostModel(), est, 55 * ms, 0},
		{"the queue term explains the wait", DefaultCostModel(), est, 75 * ms, 0},
		{"half of it", DefaultCostModel(), est, 325 * ms, 0.5},
		{"longer than the whole backlog clamps", DefaultCostModel(), est, 3 * time.Second, 1},
		{"nothing charged teaches no share", DefaultCostModel(), Estimate{Prefill: 55 * ms, Uncached: 100}, 55 * ms, 1},
		{"saturated teaches nothing", DefaultCostModel(), Estimate{Prefill: 55 * ms, Charged: 500 * ms, Backlog: 500 * ms, Saturation: ms}, 55 * ms, 1},
		{"learning off", CostModel{LearnRate: -1}, est, 55 * ms, 1},
		{"a NaN rate learns nothing", CostModel{LearnRate: math.NaN()}, est, 55 * ms, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewCosts(tc.m)
			for range 200 {
				s.Observe("a", tc.est, tc.ttft)
			}
			if got := s.BacklogShare("a"); !(math.Abs(got-tc.want) <= 0.01) { // NaN fails too
				t.Fatalf("backlog share %.3f, want %.3f", got, tc.want)
			}
			if tok, req, _ := s.Learned("a"); tc.est.Charged > 0 && (tok != s.m.PerToken || req != s.m.PerRequest) {
				t.Fatalf("a backlog sample taught per token %v, per request %v", tok, req)
			}
			if got := s.BacklogShare("b"); got != DefaultBacklogShare {
				t.Fatalf("another endpoint's share %.3f", got)
			}
		})
	}
}

// The estimate prices the charged backlog at the endpoint's learned share
// and keeps the clock's own reading beside it.
func TestEstimateBacklogShare(t *testing.T) {
	ms := time.Millisecond
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name        string
		share       float64 // learned first from one answer at this share (rate 1: it outweighs the prior)
		wantBacklog time.Duration
		wantTotal   time.Duration // a cold 400-token prompt: 130 ms of prefill
	}{
		{"prior", 1, 530 * ms, 660 * ms},
		{"half", 0.5, 265 * ms, 395 * ms},
		{"none", 0, 0, 130 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewCosts(CostModel{LearnRate: 1})
			s.Observe("a", Estimate{Prefill: 10 * ms, Charged: time.Second}, 10*ms+time.Duration(tc.share*float64(time.Second)))
			s.Charge("a", t0, 2000)
			e := s.Estimate(&Candidate{ID: "a"}, t0, 400, 0)
			if e.Charged != 530*ms || e.Backlog != tc.wantBacklog || e.Total() != tc.wantTotal {
				t.Fatalf("charged %v backlog %v total %v, want 530ms %v %v", e.Charged, e.Backlog, e.Total(), tc.wantBacklog, tc.wantTotal)
			}
		})
	}
}

// The share weighs each answer by the backlog it was placed behind: a few
// answers behind long backlogs outweigh the prior, and an answer behind a
// few milliseconds of backlog (its wait mostly noise) barely moves it.
func TestBacklogShareWeighsByBacklog(t *testing.T) {
	ms := time.Millisecond
	behind := func(charged time.Duration) Estimate {
		return Estimate{Prefill: 55 * ms, Charged: charged, Backlog: charged}
	}
	for _, tc := range []struct {
		name     string
		samples  []Estimate
		waits    []time.Duration // each sample's wait beyond its prefill
		min, max float64
	}{
		{"three side-by-side answers outweigh the prior", []Estimate{behind(500 * ms), behind(500 * ms), behind(500 * ms)},
			[]time.Duration{0, 0, 0}, 0, 0.2},
		{"three answers that waited it all keep it", []Estimate{behind(500 * ms), behind(500 * ms), behind(500 * ms)},
			[]time.Duration{500 * ms, 500 * ms, 500 * ms}, 0.99, 1},
		{"a tiny backlog's full wait barely counts", []Estimate{behind(500 * ms), behind(500 * ms), behind(500 * ms), behind(5 * ms)},
			[]time.Duration{0, 0, 0, 5 * ms}, 0, 0.2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewCosts(DefaultCostModel())
			for i, e := range tc.samples {
				s.Observe("a", e, e.Prefill+tc.waits[i])
			}
			if got := s.BacklogShare("a"); got < tc.min || got > tc.max {
				t.Fatalf("backlog share %.3f, want within [%.2f, %.2f]", got, tc.min, tc.max)
			}
		})
	}
}

// A request no candidate holds is placed by the same estimate as every
// other choice (Total): the charged backlog counts at the share the engine
// was learned to make a newcomer wait. On an engine that computes prefills
// in turn (the prior, share 1) a cold prefill just sent is passed over for
// an idle engine or one running a few more requests; on one that prefills
// side by side (share 0) it delays no newcomer, and the smaller batch wins
// because it stretches the prefill less — the request just sent is one
// more in the batch (its in-flight count), so between idle engines the
// other one still wins.
func TestCheapestRotatingPlacement(t *testing.T) {
	t0 := time.Unix(1000, 0)
	run := func(n int) EngineLoad { return EngineLoad{Valid: true, Running: n} }
	for _, tc := range []struct {
		name    string
		share   float64
		chargeA bool
		a, b    EngineLoad
		want    string
	}{
		{"prior", 1, true, EngineLoad{}, EngineLoad{}, "b"},
		{"prior, b's batch a little larger", 1, true, EngineLoad{}, run(4), "b"},
		{"learned side by side", 0, true, EngineLoad{}, EngineLoad{}, "b"},
		{"learned side by side, b's batch a little larger", 0, true, EngineLoad{}, run(4), "a"},
		{"learned side by side, b's batch one larger", 0, true, EngineLoad{}, run(2), "a"},
		{"learned side by side, b's batch much larger", 0, true, EngineLoad{}, run(12), "a"},
		{"prior, b's batch much larger", 1, true, EngineLoad{}, run(12), "b"},
		{"no charges: the smaller batch", 0, false, run(8), run(2), "b"},
		{"no charges: the smaller batch, reversed", 0, false, run(2), run(8), "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewCosts(CostModel{LearnRate: 1})
			s.Observe("a", Estimate{Prefill: 10 * time.Millisecond, Charged: time.Second}, 10*time.Millisecond+time.Duration(tc.share*float64(time.Second)))
			if tc.chargeA {
				s.Charge("a", t0, 1710)
			}
			cands := []Candidate{{ID: "a", Engine: tc.a}, {ID: "b", Index: 1, Engine: tc.b}}
			if tc.chargeA {
				cands[0].Load = 1 // the request charged is in flight
			}
			f := &Facts{Now: t0}
			prices := s.Price(f, cands, 1710, nil)
			var cur atomic.Uint64
			for range 4 {
				if i := CheapestRotating(prices, cands, 0, &cur); cands[i].ID != tc.want {
					t.Fatalf("placed on %s (%+v), want %s", cands[i].ID, prices, tc.want)
				}
			}
		})
	}
}
