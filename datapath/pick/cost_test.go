package pick

import (
	"testing"
	"time"
)

func TestCostModelEstimate(t *testing.T) {
	ms := time.Millisecond
	m := DefaultCostModel()
	// slow is a prefill of d beside running of the default window's 16.
	slow := func(d time.Duration, running int) time.Duration { return d * time.Duration(16+running) / 16 }
	for _, tc := range []struct {
		name           string
		m              CostModel
		q              QueueState
		tokens, cached int
		want           time.Duration
	}{
		{"idle cold", m, QueueState{}, 2200, 0, 30*ms + 2200*250*time.Microsecond},
		{"idle full hit but last block", m, QueueState{}, 2200, 2192, 30*ms + 8*250*time.Microsecond},
		{"cached beyond prompt clamps", m, QueueState{}, 100, 500, 30 * ms},
		{"running in the batch cost a share and stretch the prefill", m, QueueState{InFlight: 8}, 0, 0, slow(30*ms, 8) + 8*100*ms/16},
		{"window full", m, QueueState{InFlight: 16}, 0, 0, 2*30*ms + 100*ms},
		{"a long prefill beside a full batch takes twice as long", m, QueueState{InFlight: 16}, 1710, 0, 2*(30*ms+1710*250*time.Microsecond) + 100*ms},
		{"queued beyond the window cost a slot each", m, QueueState{InFlight: 20}, 0, 0, 2*30*ms + 100*ms + 4*100*ms},
		{"engine counts replace in-flight when they see more", m, QueueState{InFlight: 2, EngineValid: true, Running: 4, Waiting: 1}, 0, 0, slow(30*ms, 4) + 4*100*ms/16 + 100*ms},
		{"engine queue built by others counts in full", m, QueueState{InFlight: 0, EngineValid: true, Running: 16, Waiting: 30}, 0, 0, 2*30*ms + 100*ms + 30*100*ms},
		{"requests sent since the scrape join a batch with room", m, QueueState{InFlight: 6, EngineValid: true, Running: 2}, 0, 0, slow(30*ms, 6) + 6*100*ms/16},
		{"requests sent since the scrape overflow the window into the queue", m, QueueState{InFlight: 20, EngineValid: true, Running: 14}, 0, 0, 2*30*ms + 100*ms + 4*100*ms},
		{"requests sent since the scrape queue behind an engine queue", m, QueueState{InFlight: 40, EngineValid: true, Running: 4, Waiting: 1}, 0, 0, slow(30*ms, 4) + 4*100*ms/16 + 36*100*ms},
		{"zero model takes the defaults", CostModel{}, QueueState{InFlight: 20}, 1000, 200, 100*ms + 4*100*ms + 2*(30*ms+800*250*time.Microsecond)},
		{"negative overhead is none", CostModel{Overhead: -1}, QueueState{}, 4, 0, time.Millisecond},
		{"negative batch slowdown is none", CostModel{BatchSlowdown: -1}, QueueState{InFlight: 16}, 1710, 0, 30*ms + 1710*250*time.Microsecond + 100*ms},
		{"custom window and per-request", CostModel{PerRequest: 50 * ms, Window: 2, PerToken: time.Millisecond, BatchSlowdown: 0.5}, QueueState{InFlight: 3}, 10, 4, 50*ms + 50*ms + (30*ms+6*ms)*3/2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.m.Estimate(tc.q, tc.tokens, tc.cached); got != tc.want {
				t.Fatalf("Estimate(%+v, %d, %d) = %v, want %v", tc.q, tc.tokens, tc.cached, got, tc.want)
			}
		})
	}
}

// The trade the model exists for: a large hit survives a little load, and
// loses to an idle cold engine once its engine really queues.
func TestCostModelTrade(t *testing.T) {
	m := DefaultCostModel()
	const tokens, hit = 2200, 2000
	cold := m.Estimate(QueueState{InFlight: 2}, tokens, 0)
	for _, tc := range []struct {
		holderLoad int
		holderWins bool
	}{
		{0, true}, {5, true}, {16, true}, {18, true}, {20, true}, {22, false}, {40, false},
	} {
		h := m.Estimate(QueueState{InFlight: tc.holderLoad}, tokens, hit)
		if got := h < cold; got != tc.holderWins {
			t.Errorf("holder with %d in flight: %v vs cold %v; holder wins = %v, want %v", tc.holderLoad, h, cold, got, tc.holderWins)
		}
	}
}

func TestCheapest(t *testing.T) {
	c := func(loads ...int) []Candidate {
		out := make([]Candidate, len(loads))
		for i, l := range loads {
			out[i] = Candidate{ID: string(rune('a' + i)), Load: l}
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		est    []time.Duration
		cached []int
		cands  []Candidate
		want   int
	}{
		{"least estimate", []time.Duration{3, 1, 2}, []int{0, 0, 0}, c(0, 0, 0), 1},
		{"tie to more cached", []time.Duration{1, 1, 1}, []int{0, 32, 16}, c(0, 0, 0), 1},
		{"then to lower load", []time.Duration{1, 1, 1}, []int{16, 16, 16}, c(3, 2, 2), 1},
		{"then the earlier", []time.Duration{1, 1}, []int{0, 0}, c(1, 1), 0},
		{"one candidate", []time.Duration{9}, []int{0}, c(5), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Cheapest(tc.est, tc.cached, tc.cands); got != tc.want {
				t.Fatalf("Cheapest = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestQueueOfReadsLoad(t *testing.T) {
	if q := QueueOf(&Candidate{Load: 7}); q.InFlight != 7 || q.EngineValid {
		t.Fatalf("QueueOf = %+v, want in-flight 7 without engine counts", q)
	}
	stale := Candidate{Load: 7, Engine: EngineLoad{Valid: false, Running: 3, Waiting: 9}}
	if q := QueueOf(&stale); q.EngineValid {
		t.Fatalf("QueueOf(stale engine load) = %+v, want the engine counts ignored", q)
	}
	fresh := Candidate{Load: 7, Engine: EngineLoad{Valid: true, Running: 3, Waiting: 9}}
	if q := QueueOf(&fresh); !q.EngineValid || q.Running != 3 || q.Waiting != 9 || q.InFlight != 7 {
		t.Fatalf("QueueOf(fresh engine load) = %+v, want running 3, waiting 9, in-flight 7", q)
	}
}
