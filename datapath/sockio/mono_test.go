package sockio

import (
	"math"
	"net"
	"testing"
	"time"
)

// TestMonoRoundTrip: a deadline goes through Mono and back to the moment
// it was (monotonic readings exactly), the zero time stays none, and far
// ones stay far, in order.
func TestMonoRoundTrip(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name string
		t    time.Time
	}{
		{"now", now},
		{"past", now.Add(-time.Hour)},
		{"before the epoch", epoch.Add(-time.Second)},
		{"future", now.Add(90 * time.Second)},
		{"far future", now.Add(100 * 365 * 24 * time.Hour)},
		{"a long time ago", aLongTimeAgo},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := MonoOf(tc.t)
			if m == NoDeadline {
				t.Fatalf("MonoOf(%v) is NoDeadline", tc.t)
			}
			if got := m.Time(); !got.Equal(tc.t) {
				t.Fatalf("MonoOf(%v).Time() = %v (%v off)", tc.t, got, got.Sub(tc.t))
			}
			if got := time.Until(m.Time()); (got > 0) != (time.Until(tc.t) > 0) {
				t.Fatalf("until %v is %v, past/future flipped", tc.t, got)
			}
		})
	}
	if m := MonoOf(time.Time{}); m != NoDeadline || !m.Time().IsZero() {
		t.Fatalf("zero time: %d, %v", m, m.Time())
	}
}

// TestMonoAdd: Add is the deadline a Time.Add gives, saturates, and
// never lands on NoDeadline.
func TestMonoAdd(t *testing.T) {
	from := time.Now()
	for _, tc := range []struct {
		name string
		m    Mono
		d    time.Duration
		want Mono
	}{
		{"later", 100, 50, 150},
		{"earlier", 100, -50, 50},
		{"onto none", 50, -50, 1},
		{"overflow", math.MaxInt64 - 1, 10, math.MaxInt64},
		{"underflow", math.MinInt64 + 1, -10, math.MinInt64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.m.Add(tc.d); got != tc.want {
				t.Fatalf("%d.Add(%d) = %d, want %d", tc.m, tc.d, got, tc.want)
			}
		})
	}
	for _, d := range []time.Duration{0, time.Millisecond, -time.Minute, 90 * time.Second} {
		if got, want := MonoOf(from).Add(d).Time(), from.Add(d); !got.Equal(want) {
			t.Fatalf("Add(%v): %v, want %v", d, got, want)
		}
	}
	if a, b := Now(), Now(); b < a {
		t.Fatalf("Now went back: %d then %d", a, b)
	}
}

// TestSetReadDeadlineAt: the lazy read deadline keeps an armed one that
// fires first and arms one that fires sooner; zero lifts nothing armed.
func TestSetReadDeadlineAt(t *testing.T) {
	base := Now()
	for _, tc := range []struct {
		name            string
		armed, set      Mono
		wantArmed, want Mono
	}{
		{"none armed: arms", NoDeadline, base + 10, base + 10, base + 10},
		{"earlier: re-arms", base + 10, base + 5, base + 5, base + 5},
		{"later: kept", base + 10, base + 20, base + 10, base + 20},
		{"equal: kept", base + 10, base + 10, base + 10, base + 10},
		{"zero: kept armed", base + 10, NoDeadline, base + 10, NoDeadline},
		{"past: armed", base + 10, base - 1e9, base - 1e9, base - 1e9},
		{"none to none", NoDeadline, NoDeadline, NoDeadline, NoDeadline},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := net.Pipe()
			t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
			c := New(a)
			if tc.armed != NoDeadline {
				_ = c.SetReadDeadlineAt(tc.armed)
			}
			_ = c.SetReadDeadlineAt(tc.set)
			if c.armed != tc.wantArmed || c.want != tc.want {
				t.Fatalf("armed %d want %d; want armed %d want %d", c.armed, c.want, tc.wantArmed, tc.want)
			}
		})
	}
}
