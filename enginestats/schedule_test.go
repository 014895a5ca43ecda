package enginestats

import (
	"testing"
	"time"
)

// TestScheduleBursts: up to burst targets go in one burst per interval;
// more are split into equal bursts spread over the interval, and every
// target is in exactly one burst of each interval.
func TestScheduleBursts(t *testing.T) {
	const interval = 240 * time.Millisecond
	tests := []struct {
		targets, bursts, size int
	}{
		{1, 1, 1},
		{64, 1, 64},
		{65, 2, 33},
		{130, 3, 44},
		{640, 10, 64},
	}
	for _, tt := range tests {
		var sc schedule
		for range tt.targets {
			sc.add(&worker{})
		}
		seen := map[*worker]int{}
		for i := range tt.bursts {
			pause, more := sc.nextLocked(interval)
			if !more || pause != interval/time.Duration(tt.bursts) {
				t.Fatalf("%d targets: burst %d: pause %v, more %v; want %v", tt.targets, i, pause, more, interval/time.Duration(tt.bursts))
			}
			if i == 0 && len(sc.due) != tt.size {
				t.Errorf("%d targets: burst of %d, want %d", tt.targets, len(sc.due), tt.size)
			}
			for _, w := range sc.due {
				seen[w]++
			}
		}
		if len(seen) != tt.targets {
			t.Errorf("%d targets: %d scraped in one interval", tt.targets, len(seen))
		}
		for _, n := range seen {
			if n > 2 { // the last burst may wrap onto the first few
				t.Errorf("%d targets: one scraped %d times in an interval", tt.targets, n)
			}
		}
	}
	var empty schedule
	if _, more := empty.nextLocked(interval); more {
		t.Error("an empty schedule asked for another burst")
	}
}

// TestScheduleCompact: stopped workers leave the round, the others keep
// their order.
func TestScheduleCompact(t *testing.T) {
	var sc schedule
	ws := []*worker{{}, {}, {}, {}}
	for _, w := range ws {
		sc.add(w)
	}
	ws[1].gone, ws[3].gone = true, true
	sc.next = 3
	sc.compact()
	if len(sc.order) != 2 || sc.order[0] != ws[0] || sc.order[1] != ws[2] || sc.next != 0 {
		t.Errorf("after compact: %d workers, next %d", len(sc.order), sc.next)
	}
}
