package datapath

import (
	"testing"
	"time"
)

// TestSinceStart: a reading's time since the start is finishedAt's total
// when it is the end's reading, else the difference (zero: no reading).
func TestSinceStart(t *testing.T) {
	start := time.Now() // with a monotonic reading, as the request's
	end := start.Add(3 * time.Millisecond)
	for _, tc := range []struct {
		name  string
		t     time.Time
		end   time.Time
		total time.Duration
		want  time.Duration
	}{
		{"no reading", time.Time{}, end, 3 * time.Millisecond, 0},
		{"the end's reading", end, end, 3 * time.Millisecond, 3 * time.Millisecond},
		{"before the end", start.Add(time.Millisecond), end, 3 * time.Millisecond, time.Millisecond},
		{"no end yet", start.Add(2 * time.Millisecond), time.Time{}, 0, 2 * time.Millisecond},
		{"the end's instant, no monotonic reading", end.Round(0), end, 3 * time.Millisecond, end.Round(0).Sub(start)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := &exchange{start: start, end: tc.end, total: tc.total}
			if got := sinceStart(tc.t, x); got != tc.want {
				t.Fatalf("sinceStart = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestFinishedTotal: the latency finished returns, and the total it keeps
// for observeEnd, are the end's reading less the start, as Time.Sub has it.
func TestFinishedTotal(t *testing.T) {
	x := &exchange{start: time.Now().Add(-5 * time.Millisecond)}
	x.obs.clock.Start = &x.start
	got := x.finished()
	if want := x.end.Sub(x.start); got != want || x.total != want {
		t.Fatalf("finished = %v, total %v; want %v", got, x.total, want)
	}
}
