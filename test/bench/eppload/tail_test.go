package main

import (
	"testing"
	"time"
)

// gctrace lines give each cycle's number and wall-clock length; other
// lines pass.
func TestParseGCTrace(t *testing.T) {
	tests := []struct {
		line string
		n    uint32
		d    time.Duration
		ok   bool
	}{
		{"gc 12 @3.456s 4%: 0.031+2.1+0.025 ms clock, 0.063+0.5/1.0/0+0.051 ms cpu, 24->25->12 MB, 25 MB goal, 0 MB stacks, 0 MB globals, 2 P",
			12, 2156 * time.Microsecond, true},
		{"gc 1 @0.004s 1%: 1+0+0 ms clock, 0+0/0/0+0 ms cpu, 3->3->0 MB, 4 MB goal, 0 MB stacks, 0 MB globals, 2 P (forced)", 1, time.Millisecond, true},
		{"eppload serve: API and /metrics on 127.0.7.1:37104", 0, 0, false},
		{"gc x @1s 1%: 1+1+1 ms clock", 0, 0, false},
		{"gc 3 @1s 1%: 1+a+1 ms clock, 1 ms cpu", 0, 0, false},
	}
	for _, tc := range tests {
		n, d, ok := parseGCTrace(tc.line)
		if ok != tc.ok || n != tc.n || (d-tc.d).Abs() > time.Microsecond {
			t.Errorf("parseGCTrace(%q) = %d, %v, %v; want %d, %v, %v", tc.line, n, d, ok, tc.n, tc.d, tc.ok)
		}
	}
}

// A pick overlaps a collection when their spans meet; the report counts
// the share of picks and of the slowest picks that did, and the GC's share
// of the window.
func TestAnalyseTail(t *testing.T) {
	const ms = int64(time.Millisecond)
	var recs []pickRec
	for i := range 200 { // one pick a millisecond, 100 µs each
		recs = append(recs, pickRec{start: int64(i) * ms, lat: 100 * time.Microsecond})
	}
	// The two slowest (5 ms) start inside the one collection, 10–12 ms.
	recs[10].lat, recs[11].lat = 5*time.Millisecond, 5*time.Millisecond
	spans := []span{{10 * ms, 12 * ms}, {500 * ms, 501 * ms}} // the second is outside the window
	got := analyseTail(recs, spans, 0, 200*ms)
	if got.GCCycles != 1 || got.SlowPicks != 2 {
		t.Errorf("%d cycles, %d slow picks; want 1, 2", got.GCCycles, got.SlowPicks)
	}
	if got.GCBusy != 0.01 {
		t.Errorf("GC busy %v of the window, want 0.01", got.GCBusy)
	}
	// Only the two slow picks meet it (the others end by 9.1 ms or start at 12).
	if got.PicksInGC != 2.0/200 || got.SlowestInGC != 1 {
		t.Errorf("%.3f of picks and %.2f of the slowest in GC; want 0.010 and 1", got.PicksInGC, got.SlowestInGC)
	}
	if got.P99NoGC != 100 {
		t.Errorf("p99 clear of GC %v µs, want 100", got.P99NoGC)
	}
}

// Quantiles of a histogram's growth between two reads.
func TestHistQuantile(t *testing.T) {
	before := hist{Counts: []uint64{5, 0, 0}, Buckets: []float64{0, 1e-4, 1e-3, 1e9}}
	after := hist{Counts: []uint64{95, 9, 1}, Buckets: before.Buckets}
	tests := []struct {
		q    float64
		want float64
	}{{0.5, 1e-4}, {0.95, 1e-3}, {0.999, 1e9}}
	for _, tc := range tests {
		if got := after.quantile(before, tc.q); got != tc.want {
			t.Errorf("quantile %v = %v, want %v", tc.q, got, tc.want)
		}
	}
	if n := after.countAbove(before, 1e-3); n != 1 {
		t.Errorf("%d above 1 ms, want 1", n)
	}
}
