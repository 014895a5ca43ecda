package kvexact

import (
	"testing"
	"time"
)

// TestInventoryStale: an endpoint whose feed stops while its socket stays
// connected is trusted only until work sent to it has waited StaleAfter for
// an event; its next event (any rank) restores trust. Idle is not stale.
func TestInventoryStale(t *testing.T) {
	type step struct {
		do         string // "work", "event0", "event1", "advance"
		d          time.Duration
		wantOK     bool
		wantReason string
	}
	tests := []struct {
		name       string
		staleAfter time.Duration
		ranks      int
		steps      []step
	}{
		{"idle endpoint stays trusted", 10 * time.Second, 1, []step{
			{do: "advance", d: time.Hour, wantOK: true},
		}},
		{"work without events turns stale after StaleAfter", 10 * time.Second, 1, []step{
			{do: "work", wantOK: true},
			{do: "advance", d: 10 * time.Second, wantOK: true},
			{do: "advance", d: time.Second, wantOK: false, wantReason: ReasonStale},
			{do: "work", wantOK: false, wantReason: ReasonStale}, // later work does not restart the clock
			{do: "event0", wantOK: true},
		}},
		{"an event in time keeps trust", 10 * time.Second, 1, []step{
			{do: "work", wantOK: true},
			{do: "advance", d: 5 * time.Second, wantOK: true},
			{do: "event0", wantOK: true},
			{do: "advance", d: time.Minute, wantOK: true},
		}},
		{"any rank's event answers for the endpoint", 10 * time.Second, 2, []step{
			{do: "work", wantOK: true},
			{do: "advance", d: 5 * time.Second, wantOK: true},
			{do: "event1", wantOK: true},
			{do: "advance", d: time.Minute, wantOK: true},
			{do: "work", wantOK: true},
			{do: "advance", d: 11 * time.Second, wantOK: false, wantReason: ReasonStale},
			{do: "event1", wantOK: true},
		}},
		{"negative StaleAfter disables", -1, 1, []step{
			{do: "work", wantOK: true},
			{do: "advance", d: time.Hour, wantOK: true},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv, clk, _ := newTestInv(t, func(o *Options) { o.StaleAfter = tt.staleAfter })
			seq := map[int]uint64{}
			event := func(rank int) {
				inv.Apply("a", rank, seq[rank], batchOf(stored(int(seq[rank]), 1, uint64(rank)<<32, MediumGPU)))
				seq[rank]++
			}
			for r := 0; r < tt.ranks; r++ {
				must(t, inv.SetConnected("a", r, true))
				event(r)
			}
			clk.Advance(5 * time.Second) // past warm-up
			if ok, reason := inv.Trusted("a"); !ok {
				t.Fatalf("setup: Trusted = false, %q", reason)
			}
			for i, s := range tt.steps {
				switch s.do {
				case "work":
					inv.NoteWork("a")
				case "event0":
					event(0)
				case "event1":
					event(1)
				case "advance":
					clk.Advance(s.d)
				}
				ok, reason := inv.Trusted("a")
				if ok != s.wantOK || reason != s.wantReason {
					t.Errorf("step %d (%s): Trusted = %v, %q; want %v, %q", i, s.do, ok, reason, s.wantOK, s.wantReason)
				}
				for _, rs := range inv.Ranks() {
					if rs.Trusted != s.wantOK || rs.Reason != s.wantReason {
						t.Errorf("step %d (%s): rank %d row trusted %v %q; want %v %q", i, s.do, rs.Rank, rs.Trusted, rs.Reason, s.wantOK, s.wantReason)
					}
				}
			}
		})
	}
	t.Run("unknown endpoint ignored", func(t *testing.T) {
		inv, _, _ := newTestInv(t, nil)
		inv.NoteWork("nobody") // must not create state or panic
		if ok, reason := inv.Trusted("nobody"); ok || reason != ReasonUnknownEndpoint {
			t.Errorf("Trusted = %v, %q; want false, %q", ok, reason, ReasonUnknownEndpoint)
		}
	})
}
