package ladder

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/infergate/infergate/datapath/pick"
	"github.com/infergate/infergate/kvexact"
	"github.com/infergate/infergate/metrics"
)

// With a cost model the tier takes the least estimated wait: a hit that
// the in-flight guard (3) would throw away for a little load survives, a
// hit on an engine with a real queue loses to an idle cold one, and the
// diversion goes to the cheapest candidate, not the least loaded.
func TestKVExactCostPick(t *testing.T) {
	// 64 tokens = 16 blocks of 4 (fakeIndex); 10 ms per uncached token, no
	// overhead; a batch of 2, 100 ms per queued request (50 ms per running);
	// no batch slowdown, so the figures below are the trade alone (the
	// slowdown's own table is pick's).
	cost := &pick.CostModel{PerToken: 10 * time.Millisecond, Overhead: -1, PerRequest: 100 * time.Millisecond, Window: 2, BatchSlowdown: -1}
	all := map[string]string{"a": "", "b": "", "c": ""}
	tokens := make([]uint32, 64)
	for _, tc := range []struct {
		name       string
		scores     map[string]kvexact.Score
		trusted    map[string]string
		loads      [3]int
		want       string
		wantReason string
		wantMs     [3]float64
	}{
		{"full hit beats idle cold", map[string]kvexact.Score{"a": gpu(16)}, all, [3]int{3, 0, 0}, "a", "",
			[3]float64{200, 640, 640}},
		{"cpu blocks count at their weight", map[string]kvexact.Score{"a": cpu(10)}, all, [3]int{0, 0, 0}, "a", "",
			[3]float64{320, 640, 640}},
		{"a hair of load keeps the hit (the old guard tripped)", map[string]kvexact.Score{"a": gpu(16)}, all, [3]int{5, 0, 0}, "a", "",
			[3]float64{400, 640, 640}},
		{"a real queue loses to idle cold", map[string]kvexact.Score{"a": gpu(16)}, all, [3]int{10, 1, 0}, "c", "",
			[3]float64{900, 690, 640}},
		{"diverted to the cheapest, not the least loaded", map[string]kvexact.Score{"a": gpu(16), "b": gpu(8)}, all, [3]int{10, 4, 0}, "b", "",
			[3]float64{900, 620, 640}},
		{"untrusted holder counts as cold", map[string]kvexact.Score{"a": gpu(16), "b": gpu(4)}, map[string]string{"a": kvexact.ReasonWarmup, "b": "", "c": ""}, [3]int{0, 1, 0}, "b", "",
			[3]float64{640, 530, 640}},
		{"equal estimates: more cached", map[string]kvexact.Score{"a": gpu(3), "b": gpu(8)}, all, [3]int{0, 3, 0}, "b", "",
			[3]float64{520, 520, 640}},
		{"no holder is still a miss", map[string]kvexact.Score{}, all, [3]int{5, 0, 0}, "", ReasonMiss,
			[3]float64{1040, 640, 640}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := metrics.NewKVRouting(prometheus.NewRegistry())
			tier := NewKVExact(KVExactOptions{Rule: "r", Index: &fakeIndex{scores: tc.scores, trusted: tc.trusted},
				LoadGuard: 3, Cost: cost, Metrics: m})
			cands := []Candidate{{ID: "a", Load: tc.loads[0]}, {ID: "b", Index: 1, Load: tc.loads[1]}, {ID: "c", Index: 2, Load: tc.loads[2]}}
			f := &Facts{Ctx: context.Background(), Tokens: tokens}
			idx, reason, ok := tier.Pick(f, cands)
			got := chosenID(cands, idx, ok)
			if got != tc.want || reason != tc.wantReason {
				t.Fatalf("pick = %q reason %q, want %q reason %q", got, reason, tc.want, tc.wantReason)
			}
			if v := cval(m.Tier15Misses.WithLabelValues("r", ReasonLoadGuard)); v != 0 {
				t.Fatalf("load_guard misses = %v with a cost model", v)
			}
			eidx, ereason, eok, scores := tier.Explain(f, cands)
			if eidx != idx || ereason != reason || eok != ok {
				t.Fatalf("explain = %d %q %v, pick = %d %q %v", eidx, ereason, eok, idx, reason, ok)
			}
			for i, s := range scores {
				if s.EstimateMs != tc.wantMs[i] {
					t.Fatalf("explain estimate of %s = %v ms, want %v (%+v)", s.ID, s.EstimateMs, tc.wantMs[i], scores)
				}
			}
		})
	}
}

// Without a cost model the explanation carries no estimate.
func TestKVExactNoCostNoEstimate(t *testing.T) {
	tier := NewKVExact(KVExactOptions{Rule: "r", Index: &fakeIndex{scores: map[string]kvexact.Score{"a": gpu(2)}, trusted: map[string]string{"a": ""}}, LoadGuard: 3})
	_, _, ok, scores := tier.Explain(&Facts{Ctx: context.Background(), Tokens: make([]uint32, 16)}, []Candidate{{ID: "a"}})
	if !ok || len(scores) != 1 || scores[0].EstimateMs != 0 {
		t.Fatalf("explain = %v %+v, want a hit without an estimate", ok, scores)
	}
}
