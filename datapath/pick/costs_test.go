package pick

import (
	"math"
	"sync/atomic"
	"testing"
	"time"
)

func TestSaturationPenalty(t *testing.T) {
	m := DefaultCostModel()
	for _, tc := range []struct {
		name string
		m    CostModel
		e    EngineLoad
		want time.Duration
	}{
		{"not reported", m, EngineLoad{Valid: true, KVUsage: -1}, 0},
		{"stale scrape", m, EngineLoad{Valid: false, KVUsage: 0.99}, 0},
		{"below the knee", m, EngineLoad{Valid: true, KVUsage: 0.8}, 0},
		{"half way", m, EngineLoad{Valid: true, KVUsage: 0.9}, 500 * time.Millisecond},
		{"full", m, EngineLoad{Valid: true, KVUsage: 1}, time.Second},
		{"over full clamps", m, EngineLoad{Valid: true, KVUsage: 1.3}, time.Second},
		{"disabled", CostModel{Saturation: -1}, EngineLoad{Valid: true, KVUsage: 1}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.m.SaturationPenalty(tc.e); got != tc.want {
				t.Fatalf("SaturationPenalty(%+v) = %v, want %v", tc.e, got, tc.want)
			}
		})
	}
}

// The backlog clock: a charge books the prefill from now or from where
// the clock stands, and runs down in real time.
func TestCostsBacklog(t *testing.T) {
	ms := time.Millisecond
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name    string
		charges []int         // uncached tokens charged at t0, one after another
		at      time.Duration // estimate taken at t0 + at
		want    time.Duration // backlog then
		wantAll time.Duration // total for a cold 400-token prompt
	}{
		{"nothing charged", nil, 0, 0, 130 * ms},
		{"one miss", []int{2000}, 0, 530 * ms, 660 * ms},
		{"two misses queue", []int{2000, 2000}, 0, 1060 * ms, 1190 * ms},
		{"runs down", []int{2000}, 200 * ms, 330 * ms, 460 * ms},
		{"run out", []int{2000}, time.Second, 0, 130 * ms},
		{"a full hit charges nothing", []int{0}, 0, 0, 130 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewCosts(DefaultCostModel())
			for _, u := range tc.charges {
				s.Charge("a", t0, u)
			}
			e := s.Estimate(&Candidate{ID: "a"}, t0.Add(tc.at), 400, 0)
			if e.Backlog != tc.want || e.Total() != tc.wantAll {
				t.Fatalf("backlog %v total %v, want %v %v (%+v)", e.Backlog, e.Total(), tc.want, tc.wantAll, e)
			}
			if o := s.Estimate(&Candidate{ID: "b"}, t0, 400, 0); o.Backlog != 0 {
				t.Fatalf("another endpoint has backlog %v", o.Backlog)
			}
		})
	}
}

// Learning moves the per-token cost toward what cold prefills take and the
// per-request cost toward what queued requests wait, within LearnBound of
// the prior.
func TestCostsLearn(t *testing.T) {
	m := DefaultCostModel()
	for _, tc := range []struct {
		name         string
		est          Estimate
		ttft         time.Duration
		n            int
		wantTok      time.Duration
		wantReq      time.Duration
		tolTok, tolR time.Duration
	}{
		// A cold 2,000-token prompt on an idle engine that takes 1.03 s:
		// 500 µs per token.
		{"slower prefill", Estimate{Uncached: 2000}, 30*time.Millisecond + time.Second, 200, 500 * time.Microsecond, m.PerRequest, 5 * time.Microsecond, 0},
		// A full hit behind 3 queued requests answering after 630 ms:
		// 200 ms per queued request.
		{"slower queue", Estimate{QueueUnits: 3}, 630 * time.Millisecond, 200, m.PerToken, 200 * time.Millisecond, 0, 2 * time.Millisecond},
		{"bounded above", Estimate{Uncached: 100}, time.Minute, 200, LearnBound * m.PerToken, m.PerRequest, 0, 0},
		{"bounded below", Estimate{Uncached: 2000}, time.Millisecond, 200, m.PerToken / LearnBound, m.PerRequest, 0, 0},
		{"nothing learnable", Estimate{}, time.Second, 10, m.PerToken, m.PerRequest, 0, 0},
		{"a charged backlog ahead teaches only its share", Estimate{Uncached: 2000, Charged: time.Millisecond, Backlog: time.Millisecond}, time.Second, 10, m.PerToken, m.PerRequest, 0, 0},
		// A cold 2,000-token prompt beside a full batch that takes twice
		// the idle prefill, as the slowdown predicted: the per-token cost
		// stays.
		{"a prefill stretched as predicted", Estimate{Uncached: 2000, Slowdown: 2}, 2 * (30*time.Millisecond + 500*time.Millisecond), 200, m.PerToken, m.PerRequest, time.Microsecond, 0},
		{"saturated teaches nothing", Estimate{Uncached: 2000, Saturation: time.Millisecond}, time.Second, 10, m.PerToken, m.PerRequest, 0, 0},
		{"no observation", Estimate{Uncached: 2000}, 0, 10, m.PerToken, m.PerRequest, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewCosts(m)
			for range tc.n {
				s.Observe("a", tc.est, tc.ttft)
			}
			tok, req, _ := s.Learned("a")
			if d := tok - tc.wantTok; d > tc.tolTok || -d > tc.tolTok {
				t.Fatalf("per token %v, want %v ± %v", tok, tc.wantTok, tc.tolTok)
			}
			if d := req - tc.wantReq; d > tc.tolR || -d > tc.tolR {
				t.Fatalf("per request %v, want %v ± %v", req, tc.wantReq, tc.tolR)
			}
			if tok2, _, n := s.Learned("b"); tok2 != m.PerToken || n != 0 {
				t.Fatalf("another endpoint learned: %v after %d", tok2, n)
			}
		})
	}
}

// Place charges the price a tier recorded, and the first-token report
// feeds learning.
func TestCostsPlace(t *testing.T) {
	s := NewCosts(DefaultCostModel())
	t0 := time.Unix(1000, 0)
	cands := []Candidate{{ID: "a"}, {ID: "b"}}
	f := &Facts{Now: t0}
	s.Price(f, cands, 2200, []int{2192, 0})
	s.Place(f, cands[0])
	if e := s.Estimate(&cands[0], t0, 0, 0); e.Backlog != 32*time.Millisecond {
		t.Fatalf("backlog after a near-full hit = %v, want 32ms (8 tokens + overhead)", e.Backlog)
	}
	f.Placed.FirstToken(t0.Add(10 * time.Millisecond))
	if _, _, n := s.Learned("a"); n != 1 {
		t.Fatalf("samples = %d, want 1", n)
	}
	// The first token at t0+10ms released the rest of the 32 ms charge.
	if e := s.Estimate(&cands[0], t0.Add(10*time.Millisecond), 0, 0); e.Backlog != 0 {
		t.Fatalf("backlog after the first token = %v, want 0", e.Backlog)
	}
	// b has no sample of its own: it is priced at the pool, which a's one
	// fast answer moved (pooled.go).
	cold := s.ModelFor("b").Prefill(400, 0)
	if tok, _ := s.Pooled(); cold != 30*time.Millisecond+400*tok {
		t.Fatalf("b's cold prefill %v, want the pooled %v per token", cold, tok)
	}
	g := &Facts{Now: t0, PromptTokens: 400}
	s.Place(g, cands[1]) // unpriced: priced alone, cold
	if e := s.Estimate(&cands[1], t0, 0, 0); e.Backlog != cold {
		t.Fatalf("backlog of an unpriced placement = %v, want %v", e.Backlog, cold)
	}
	h := &Facts{Now: t0, PromptTokens: 400}
	s.Place(h, cands[1]) // booked behind g: the clock ends at t0+2×cold
	g.Placed.Done(50 * time.Millisecond)
	if e := s.Estimate(&cands[1], t0, 0, 0); e.Backlog != 50*time.Millisecond+cold {
		t.Fatalf("backlog after the first prefill ended early = %v, want %v (h's from t0+50ms)", e.Backlog, 50*time.Millisecond+cold)
	}
	h.Placed.Prefilled(50 * time.Millisecond)
	h.Placed.Done(0) // a second report changes nothing
	if _, _, n := s.Learned("b"); n != 0 {
		t.Fatalf("b learned from a placement with a backlog ahead (%d samples)", n)
	}
	if e := s.Estimate(&cands[1], t0.Add(50*time.Millisecond), 0, 0); e.Backlog != 0 {
		t.Fatalf("backlog after both = %v, want 0", e.Backlog)
	}
}

// A negative learn rate disables learning, and so does a NaN one (the
// flag parses "NaN"), which would otherwise make every learned cost NaN.
func TestCostsLearnDisabled(t *testing.T) {
	for _, rate := range []float64{-1, math.NaN()} {
		m := DefaultCostModel()
		m.LearnRate = rate
		s := NewCosts(m)
		s.Observe("a", Estimate{Uncached: 2000}, time.Minute)
		if tok, _, n := s.Learned("a"); tok != DefaultCostPerToken || n != 0 {
			t.Fatalf("rate %v: learned %v after %d with learning off", rate, tok, n)
		}
	}
}

// The wait ahead is the larger of the queue and the backlog, not their sum.
func TestEstimateTotal(t *testing.T) {
	for _, tc := range []struct {
		e    Estimate
		want time.Duration
	}{
		{Estimate{Queue: 300, Backlog: 100, Prefill: 10, Saturation: 1}, 311},
		{Estimate{Queue: 100, Backlog: 300, Prefill: 10}, 310},
		{Estimate{Prefill: 10}, 10},
	} {
		if got := tc.e.Total(); got != tc.want {
			t.Errorf("%+v.Total() = %v, want %v", tc.e, got, tc.want)
		}
	}
}

func TestCheapestRotating(t *testing.T) {
	cands := []Candidate{{ID: "a"}, {ID: "b"}, {ID: "c"}}
	p := func(ds ...time.Duration) []Priced {
		out := make([]Priced, len(ds))
		for i, d := range ds {
			out[i] = Priced{ID: cands[i].ID, Estimate: Estimate{Queue: d}}
		}
		return out
	}
	var cur atomic.Uint64
	if got := CheapestRotating(p(3, 1, 2), cands, 0, &cur); got != 1 {
		t.Fatalf("cheapest = %d, want 1", got)
	}
	seen := map[int]int{}
	for range 6 {
		seen[CheapestRotating(p(1, 5, 1), cands, 0, &cur)]++
	}
	if seen[0] != 3 || seen[2] != 3 {
		t.Fatalf("ties rotated %v, want 3 each on 0 and 2", seen)
	}
	k := CheapestRotating(p(1, 1, 1), cands, 42, &cur)
	if again := CheapestRotating(p(1, 1, 1), cands, 42, &cur); again != k {
		t.Fatalf("keyed tie moved: %d then %d", k, again)
	}
}
