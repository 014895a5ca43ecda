package kvplane

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/infergate/infergate/datapath/ladder"
	"github.com/infergate/infergate/kvexact"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/spec"
)

// TestPickSingleCostModel: by default a mode-3 rule weighs the holder's
// cached prefill against its load (a 16-block hit survives 5 in flight
// against an idle cold engine, which the in-flight guard of 3 would have
// thrown away), and LegacyLoadGuard restores the guard's fall-through.
func TestPickSingleCostModel(t *testing.T) {
	for _, tc := range []struct {
		name       string
		legacy     bool
		wantOK     bool
		wantReason string
		wantMs     bool
	}{
		{"cost model keeps the hit", false, true, "", true},
		{"legacy guard falls through", true, false, ladder.ReasonLoadGuard, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			o := rec.opts()
			clk := &fakeClock{now: time.Unix(1000, 0)}
			o.Clock, o.LegacyLoadGuard = clk, tc.legacy
			p := New(o, metrics.NewKV(prometheus.NewRegistry()), nil)
			defer p.Close()
			rk, err := p.Install(nil, pdRule(spec.KV{Mode: 3, Warmup: time.Second}, p1, p2))
			if err != nil {
				t.Fatal(err)
			}
			tokens := make([]uint32, 256) // 16 blocks of 16
			hashes := make([]uint64, 16)
			for i := range tokens {
				tokens[i] = uint32(i)
			}
			for i := range hashes {
				hashes[i] = uint64(100 + i)
			}
			for _, id := range []string{p1.ID, p2.ID} {
				if err := rec.sinks[id].SetConnected(id, 0, true); err != nil {
					t.Fatal(err)
				}
			}
			ev := kvexact.Event{Kind: kvexact.EventBlockStored, BlockSize: 16, TokenIDs: tokens, BlockHashes: hashes}
			rec.sinks[p1.ID].Apply(p1.ID, 0, 1, kvexact.Batch{Events: []kvexact.Event{ev}})
			clk.add(2 * time.Second) // past warm-up: both trusted

			cands := []ladder.Candidate{{ID: p1.ID, Load: 5}, {ID: p2.ID, Index: 1}}
			idx, reason, ok := rk.PickSingle(&ladder.Facts{Tokens: tokens}, cands)
			if ok != tc.wantOK || reason != tc.wantReason || (ok && idx != 0) {
				t.Fatalf("PickSingle = %d %q %v, want p1=%v reason %q", idx, reason, ok, tc.wantOK, tc.wantReason)
			}
			_, _, _, scores := rk.Explain(&ladder.Facts{Tokens: tokens}, cands)
			if len(scores) != 2 || (scores[0].EstimateMs > 0) != tc.wantMs || (tc.wantMs && scores[0].EstimateMs >= scores[1].EstimateMs) {
				t.Fatalf("explain scores %+v: estimates shown = %v, holder cheaper expected", scores, tc.wantMs)
			}
		})
	}
}
