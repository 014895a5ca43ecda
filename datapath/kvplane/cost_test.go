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
			idx, _, reason, ok := rk.PickSingle(&ladder.Facts{Tokens: tokens}, cands)
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

// TestPickSingleNamesPicker: PickSingle says which picker chose, so the
// access line credits the KV-exact tier with its hits and the cost model
// with its placement of a miss on a least-connections rule; a miss the
// rule's own mode serves names nothing.
func TestPickSingleNamesPicker(t *testing.T) {
	for _, tc := range []struct {
		name   string
		sel    spec.Selector
		legacy bool
		held   bool // the prompt's blocks are cached on p1
		wantOK bool
		wantBy string
	}{
		{"hit", spec.SelRoundRobin, false, true, true, ladder.TierKVExact},
		{"miss keeps round robin", spec.SelRoundRobin, false, false, false, ""},
		{"miss on lc placed by cost", spec.SelLeastConn, false, false, true, ladder.TierLoad},
		{"miss on lc with legacy guard", spec.SelLeastConn, true, false, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			o := rec.opts()
			clk := &fakeClock{now: time.Unix(1000, 0)}
			o.Clock, o.LegacyLoadGuard = clk, tc.legacy
			p := New(o, metrics.NewKV(prometheus.NewRegistry()), nil)
			defer p.Close()
			r := pdRule(spec.KV{Mode: 3, Warmup: time.Second}, p1, p2)
			r.Selector = tc.sel
			rk, err := p.Install(nil, r)
			if err != nil {
				t.Fatal(err)
			}
			tokens := make([]uint32, 32) // 2 blocks of 16
			for i := range tokens {
				tokens[i] = uint32(i)
			}
			for _, id := range []string{p1.ID, p2.ID} {
				if err := rec.sinks[id].SetConnected(id, 0, true); err != nil {
					t.Fatal(err)
				}
			}
			// p1 holds some other prompt, so the inventory is populated
			// and trusted either way.
			stored := make([]uint32, 32)
			for i := range stored {
				stored[i] = uint32(1000 + i)
			}
			if tc.held {
				stored = tokens
			}
			ev := kvexact.Event{Kind: kvexact.EventBlockStored, BlockSize: 16, TokenIDs: stored, BlockHashes: []uint64{7, 8}}
			rec.sinks[p1.ID].Apply(p1.ID, 0, 1, kvexact.Batch{Events: []kvexact.Event{ev}})
			clk.add(2 * time.Second)

			cands := []ladder.Candidate{{ID: p1.ID}, {ID: p2.ID, Index: 1}}
			idx, by, reason, ok := rk.PickSingle(&ladder.Facts{Tokens: tokens}, cands)
			if ok != tc.wantOK || string(by) != tc.wantBy || (tc.held && idx != 0) {
				t.Fatalf("PickSingle = %d by %q (%q) ok %v, want by %q ok %v", idx, by, reason, ok, tc.wantBy, tc.wantOK)
			}
		})
	}
}
