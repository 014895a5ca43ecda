package pick

import (
	"sync"
	"testing"
	"time"
)

// Pricing, placing and learning run on every request concurrently, through
// the rules' scoped views of one Costs as well as the Costs itself; the
// backlog clock must account every charge exactly once.
func TestCostsConcurrent(t *testing.T) {
	s := NewCosts(DefaultCostModel())
	t0 := time.Unix(1000, 0)
	cands := []Candidate{{ID: "a"}, {ID: "b"}}
	views := []*Costs{s, s.Scoped([]string{"a", "b"}), s.Scoped([]string{"b", "a", "c"})}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := views[g%len(views)]
			for range 100 {
				f := &Facts{Now: t0}
				s.Price(f, cands, 400, nil)
				s.Place(f, cands[g%2])
				s.Observe(cands[g%2].ID, Estimate{Uncached: 400}, 130*time.Millisecond)
			}
		}()
	}
	wg.Wait()
	// 400 placements of a cold 400-token prompt (130 ms) on each endpoint,
	// all at t0: the clock stands 400 × 130 ms ahead.
	for _, c := range cands {
		if e := s.Estimate(&c, t0, 0, 0); e.Backlog != 400*130*time.Millisecond {
			t.Fatalf("%s backlog %v, want %v", c.ID, e.Backlog, 400*130*time.Millisecond)
		}
	}
}
