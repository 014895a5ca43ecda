package datapath

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/infergate/infergate/datapath/respclock"
	"github.com/infergate/infergate/datapath/sockio"
	"github.com/infergate/infergate/datapath/streambound"
)

// TestSSEEmitReadAt: an event relayed from an epoll loop is timed at the
// loop's reading for its batch (the at Emit is given), not at a clock
// reading of Emit's own; one read outside a loop (no reading) is timed at
// Emit's. The first byte's time tells which reading the event took.
func TestSSEEmitReadAt(t *testing.T) {
	start := time.Now().Add(-time.Hour)
	for _, tc := range []struct {
		name  string
		at    sockio.Mono // NoDeadline: none given
		exact bool        // want the first byte at start + at's time since start
	}{
		{name: "the loop's reading", at: sockio.MonoOf(start).Add(5 * time.Second), exact: true},
		{name: "no reading: Emit's own", at: sockio.NoDeadline},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			rec.Header().Set("Content-Type", "text/event-stream")
			clk := &respclock.Writer{ResponseWriter: rec, Start: &start}
			s := &sseStream{clk: clk, w: clk, start: sockio.MonoOf(start), bound: streambound.Bound{Idle: time.Minute}}
			before := time.Now()
			if err := s.Emit([]byte("data: a\n\n"), tc.at); err != nil {
				t.Fatal(err)
			}
			after := time.Now()
			first := clk.First()
			if tc.exact {
				if want := start.Add(5 * time.Second); !first.Equal(want) {
					t.Fatalf("first byte at %v; want the loop's reading %v", first, want)
				}
				return
			}
			if first.Before(before) || first.After(after) {
				t.Fatalf("first byte at %v; want a reading of Emit's, in [%v, %v]", first, before, after)
			}
		})
	}
}
