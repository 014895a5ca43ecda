package kvexact

import (
	"testing"
	"time"
)

// TestInventoryReconnectClears: a killed and restarted engine comes back
// with an empty cache and no identity on the wire, and PUB drops whatever a
// missing subscriber would have received; so a reconnect clears the rank
// instead of trusting the old blocks again after warm-up; the sequence is
// kept so the next event still classifies restart vs gap. A first connect
// and a disconnect keep the blocks.
func TestInventoryReconnectClears(t *testing.T) {
	tests := []struct {
		name       string
		steps      []string // connect, disconnect, event
		wantBlocks int
	}{
		{"first connect keeps events seen before it", []string{"event", "connect"}, 2},
		{"disconnect alone keeps blocks (untrusted)", []string{"connect", "event", "disconnect"}, 2},
		{"reconnect clears", []string{"connect", "event", "disconnect", "connect"}, 0},
		{"events after the reconnect are indexed", []string{"connect", "event", "disconnect", "connect", "event"}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv, clk, _ := newTestInv(t, nil)
			seq := uint64(0)
			for _, s := range tt.steps {
				switch s {
				case "connect":
					must(t, inv.SetConnected("a", 0, true))
				case "disconnect":
					must(t, inv.SetConnected("a", 0, false))
				case "event":
					inv.Apply("a", 0, seq, batchOf(stored(0, 2, 0, MediumGPU)))
					seq++
				}
			}
			if got := inv.Blocks("a"); got != tt.wantBlocks {
				t.Errorf("blocks = %d, want %d", got, tt.wantBlocks)
			}
			clk.Advance(5 * time.Second)
			if ok, why := inv.Trusted("a"); tt.steps[len(tt.steps)-1] != "disconnect" && !ok {
				t.Errorf("after warm-up: Trusted = false, %q", why)
			}
		})
	}
	t.Run("reason shown during the warm-up after a reconnect", func(t *testing.T) {
		inv, _, m := newTestInv(t, nil)
		must(t, inv.SetConnected("a", 0, true))
		inv.Apply("a", 0, 0, batchOf(stored(0, 2, 0, MediumGPU)))
		must(t, inv.SetConnected("a", 0, false))
		must(t, inv.SetConnected("a", 0, true))
		if ok, why := inv.Trusted("a"); ok || why != ReasonReconnect {
			t.Errorf("Trusted = %v, %q; want false, %q", ok, why, ReasonReconnect)
		}
		if n := metricValue(t, m.SeqGaps.WithLabelValues("r1", "a", "0")) + metricValue(t, m.Restarts.WithLabelValues("r1", "a", "0")); n != 0 {
			t.Errorf("a reconnect counted as %v gaps/restarts, want 0", n)
		}
	})
}
