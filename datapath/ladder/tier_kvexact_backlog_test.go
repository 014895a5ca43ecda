package ladder

import (
	"context"
	"testing"
	"time"

	"github.com/infergate/infergate/datapath/pick"
	"github.com/infergate/infergate/kvexact"
)

// A conversation's follow-up turn and its home: the home holds the
// history (1,712 of 1,944 tokens) and was just sent another conversation's
// cold 1,710-token first turn. Priced as prefills one after another (the
// prior) the home's backlog of that first turn makes it dearer than
// recomputing the whole history on an idle engine; once the home's own
// answers show that a request placed behind a backlog waits none of it
// (an engine pricing each prefill on its own tokens), the turn stays home.
// An engine whose answers do wait for the backlog keeps the diversion.
// The explanation shows the backlog the pick used.
func TestKVExactLearnedBacklogShare(t *testing.T) {
	const tokens, history, firstTurn = 1944, 1712, 1710
	ms := time.Millisecond
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name string
		// waits is how much of a charged backlog the home's earlier
		// answers waited (-1: no earlier answers).
		waits       float64
		want        string
		wantBacklog float64 // home's backlog in the explanation, ms
	}{
		{"prior: one after another", -1, "b", 457.5},
		{"answers waited for the backlog", 1, "b", 457.5},
		{"answers waited for none of it", 0, "a", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			costs := pick.NewCosts(pick.DefaultCostModel())
			if tc.waits >= 0 {
				// Sixty answers placed behind a 400 ms backlog with a
				// 102.5 ms prefill of their own (290 tokens).
				for i := range 60 {
					at := t0.Add(time.Duration(i-100) * time.Second)
					costs.Charge("a", at, 1480)
					f := &Facts{Now: at}
					costs.Price(f, []Candidate{{ID: "a"}}, 290, []int{0})
					costs.Place(f, Candidate{ID: "a"})
					f.Placed.FirstToken(at.Add(102*ms + 500*time.Microsecond + time.Duration(tc.waits*float64(400*ms))))
				}
			}
			costs.Charge("a", t0, firstTurn)
			tier := NewKVExact(KVExactOptions{Rule: "r", Costs: costs, Index: &fakeIndex{
				scores:  map[string]kvexact.Score{"a": gpu(history / 4)},
				trusted: map[string]string{"a": "", "b": ""}}})
			cands := []Candidate{{ID: "a", Load: 1}, {ID: "b", Index: 1}}
			f := &Facts{Ctx: context.Background(), Now: t0, Tokens: make([]uint32, tokens)}
			idx, reason, ok := tier.DryPick(f, cands)
			if !ok || cands[idx].ID != tc.want {
				t.Fatalf("pick = %d %q %v, want %s", idx, reason, ok, tc.want)
			}
			_, _, _, scores := tier.Explain(f, cands)
			if got := scores[0].BacklogMs; got < tc.wantBacklog-5 || got > tc.wantBacklog+5 {
				t.Fatalf("explained backlog of the home %.1f ms, want %.1f ± 5 (%+v)", got, tc.wantBacklog, scores)
			}
		})
	}
}
