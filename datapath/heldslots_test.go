package datapath

import (
	"testing"

	"github.com/infergate/infergate/datapath/flow"
	"github.com/infergate/infergate/datapath/window"
)

// TestHeldSlotsRelease: release gives back every slot taken (none, one, a
// P/D request's two) and only those, and a second release gives nothing.
func TestHeldSlotsRelease(t *testing.T) {
	for _, tc := range []struct {
		name string
		take []int // endpoints whose slot is taken, in order
	}{
		{"none", nil},
		{"one", []int{0}},
		{"the second endpoint's", []int{1}},
		{"two", []int{0, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &compiled{win: []*window.Window{window.New(2), window.New(2)}, fq: flow.New(flow.DefaultOptions(), nil)}
			var h heldSlots
			for _, i := range tc.take {
				if !h.take(c, i) {
					t.Fatalf("slot of endpoint %d not taken", i)
				}
			}
			for i, w := range c.win {
				want := 0
				for _, k := range tc.take {
					if k == i {
						want++
					}
				}
				if got := w.InFlight(); got != want {
					t.Fatalf("endpoint %d: %d in flight after the takes, want %d", i, got, want)
				}
			}
			h.release()
			h.release()
			for i, w := range c.win {
				if got := w.InFlight(); got != 0 {
					t.Fatalf("endpoint %d: %d in flight after release, want 0", i, got)
				}
			}
		})
	}
}
