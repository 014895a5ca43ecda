package pick

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// Identical engines whose answers scatter are priced alike (the pool), an
// engine that is really slower keeps a difference, and an endpoint with no
// sample of its own starts at the pool. Samples: cold 1,700-token prefills
// on idle engines whose per-token time scatters 40 % (a fixed seed),
// interleaved across the endpoints.
func TestPooledCosts(t *testing.T) {
	const n = 300
	us := time.Microsecond
	for _, tc := range []struct {
		name   string
		truth  map[string]time.Duration // per-token time of each endpoint's answers
		fresh  string                   // an endpoint that never answers
		within map[string][2]time.Duration
		spread []string // these are priced within 5 µs of each other
		dearer string   // priced at least 100 µs above every other
	}{
		{"identical engines share one price",
			map[string]time.Duration{"a": 250 * us, "b": 250 * us, "c": 250 * us, "d": 250 * us}, "e",
			map[string][2]time.Duration{"a": {225 * us, 275 * us}, "e": {225 * us, 275 * us}},
			[]string{"a", "b", "c", "d", "e"}, ""},
		{"a slower engine keeps a difference",
			map[string]time.Duration{"a": 250 * us, "b": 250 * us, "c": 250 * us, "slow": 500 * us}, "",
			map[string][2]time.Duration{"slow": {380 * us, 520 * us}, "a": {200 * us, 320 * us}},
			nil, "slow"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewCosts(DefaultCostModel())
			rng := rand.New(rand.NewPCG(1, 2))
			ids := make([]string, 0, len(tc.truth))
			for id := range tc.truth {
				ids = append(ids, id)
			}
			for range n {
				for _, id := range ids {
					per := float64(tc.truth[id]) * (1 + 0.4*rng.NormFloat64())
					ttft := DefaultCostOverhead + time.Duration(1700*max(per, 0))
					s.Observe(id, Estimate{Uncached: 1700, Slowdown: 1}, ttft)
				}
			}
			priced := func(id string) time.Duration { return s.ModelFor(id).PerToken }
			for id, r := range tc.within {
				if p := priced(id); p < r[0] || p > r[1] {
					own, _, k := s.Learned(id)
					t.Errorf("%s priced %v per token, want within %v (own %v after %d)", id, p, r, own, k)
				}
			}
			if len(tc.spread) > 0 {
				lo, hi := priced(tc.spread[0]), priced(tc.spread[0])
				for _, id := range tc.spread {
					lo, hi = min(lo, priced(id)), max(hi, priced(id))
				}
				if hi-lo > 5*us {
					t.Errorf("%v priced %v–%v per token, want within 5µs", tc.spread, lo, hi)
				}
			}
			for _, id := range ids {
				if tc.dearer != "" && id != tc.dearer && priced(tc.dearer)-priced(id) < 100*us {
					t.Errorf("%s priced %v, only %v below %s's %v", id, priced(id), priced(tc.dearer)-priced(id), tc.dearer, priced(tc.dearer))
				}
			}
			if tc.fresh != "" {
				if p, pool := priced(tc.fresh), pooledTok(s); p != pool {
					t.Errorf("fresh endpoint %v, want the pool %v", p, pool)
				}
			}
		})
	}
}

func pooledTok(s *Costs) time.Duration { tok, _ := s.Pooled(); return tok }

// Observing an answer re-pools the costs on the request path: it
// allocates nothing, however many endpoints were ever routed to (they are
// never forgotten: each rollout's new pod addresses add to them), through
// the unscoped Costs or a rule's scoped view of it.
func TestObserveAllocatesNothing(t *testing.T) {
	for _, endpoints := range []int{4, 64, 300} {
		for _, scoped := range []bool{false, true} {
			s := NewCosts(DefaultCostModel())
			ids := make([]string, endpoints)
			for i := range ids {
				ids[i] = "ep" + strconv.Itoa(i)
				s.Observe(ids[i], Estimate{Uncached: 1700, Slowdown: 1}, 500*time.Millisecond)
			}
			if scoped {
				s = s.Scoped(ids[:max(endpoints/2, 1)])
			}
			i := 0
			if n := testing.AllocsPerRun(100, func() {
				s.Observe(ids[i%len(ids)], Estimate{Uncached: 1700, Slowdown: 1}, 500*time.Millisecond)
				i++
			}); n != 0 {
				t.Errorf("%d endpoints, scoped %v: %v allocations per observation, want 0", endpoints, scoped, n)
			}
		}
	}
}

// A scoped view pools over its members alone (one rule's endpoints), from
// what they learned before it was made, while every view learns into the
// same per-endpoint state. The fleet: three engines answering at 0.6× the
// prior per token ("a…"), three at 1.8× ("b…"), noiselessly; "fresh" never
// answered and is priced at the pool it is compared in.
func TestScopedPools(t *testing.T) {
	fast, slow := []string{"a1", "a2", "a3"}, []string{"b1", "b2", "b3"}
	for _, tc := range []struct {
		name    string
		members []string // nil: the unscoped Costs
		want    float64  // fresh's per-token price over the prior
	}{
		{"unscoped pools every endpoint", nil, 1.2},
		{"the slow engines' rule", append([]string{"fresh"}, slow...), 1.8},
		{"the fast engines' rule", append([]string{"fresh"}, fast...), 0.6},
		{"a rule with a departed pod's address gone", []string{"fresh", "a1", "a2", "b3"}, 0.6},
		{"a rule of fresh endpoints only", []string{"fresh", "new"}, 1},
		{"repeated IDs count once", []string{"fresh", "b1", "b1", "b1", "a1", "a2"}, 0.6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewCosts(DefaultCostModel())
			prior := float64(s.Model().PerToken)
			for range 40 {
				for _, g := range []struct {
					ids    []string
					factor float64
				}{{fast, 0.6}, {slow, 1.8}} {
					for _, id := range g.ids {
						s.Observe(id, Estimate{Uncached: 1700, Slowdown: 1}, DefaultCostOverhead+time.Duration(1700*prior*g.factor))
					}
				}
			}
			v := s
			if tc.members != nil {
				v = s.Scoped(tc.members)
			}
			if got := float64(v.ModelFor("fresh").PerToken) / prior; got < 0.95*tc.want || got > 1.05*tc.want {
				t.Errorf("fresh priced at %.2f× the prior, want %.2f×", got, tc.want)
			}
			if own, _, n := v.Learned("b1"); n != 40 || float64(own)/prior < 1.7 {
				t.Errorf("b1 learned %v after %d answers through the view, want its own 1.8× after 40", own, n)
			}
		})
	}
}

// An engine several times slower than the rest is priced dearer within a
// few dozen answers, however much slower: its own cost stops at
// LearnBound of the prior, and what its answers show beyond that bound is
// a difference, not scatter that would hide it behind the pool. Answers
// are noiseless (the scatter is the engine's own bias alone) and
// interleaved across three identical engines and the slow one.
func TestPooledCostsFarSlower(t *testing.T) {
	const answers = 30
	for _, tc := range []struct {
		name   string
		factor float64 // the slow engine's per-token time over the others'
	}{
		{"twice as slow", 2},
		{"three times as slow", 3},
		{"five times as slow", 5},
		{"eight times as slow", 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewCosts(DefaultCostModel())
			prior := float64(s.Model().PerToken)
			for range answers {
				for _, id := range []string{"a", "b", "c", "slow"} {
					per := prior
					if id == "slow" {
						per *= tc.factor
					}
					s.Observe(id, Estimate{Uncached: 1700, Slowdown: 1}, DefaultCostOverhead+time.Duration(1700*per))
				}
			}
			slow, fast := s.ModelFor("slow").PerToken, s.ModelFor("a").PerToken
			if want := fast + time.Duration(prior/4); slow < want {
				own, _, k := s.Learned("slow")
				t.Errorf("slow engine priced %v per token, fast %v: want at least %v (own %v after %d)", slow, fast, want, own, k)
			}
		})
	}
}

// BenchmarkObserve is one learned answer (fold and repool) on a gateway
// that has seen 300 endpoints (rollouts' old pods among them), through the
// unscoped Costs (the median of all 300) and through a rule's view of 4.
func BenchmarkObserve(b *testing.B) {
	s := NewCosts(DefaultCostModel())
	ids := make([]string, 300)
	for i := range ids {
		ids[i] = "ep" + strconv.Itoa(i)
		s.Observe(ids[i], Estimate{Uncached: 1700, Slowdown: 1}, 500*time.Millisecond)
	}
	for _, bc := range []struct {
		name string
		s    *Costs
	}{{"unscoped_300", s}, {"scoped_4_of_300", s.Scoped(ids[:4])}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				bc.s.Observe(ids[i%4], Estimate{Uncached: 1700, Slowdown: 1}, 500*time.Millisecond)
				i++
			}
		})
	}
}
