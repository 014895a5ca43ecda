package gcfloor

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

// runtimeGoal is the heap goal the runtime sets at GC percentage p
// (runtime/mgcpacer.go, gcControllerState.commit, without a memory limit).
func runtimeGoal(p int, live, roots uint64) uint64 {
	return max(live+(live+roots)*uint64(p)/100, heapMinimum*uint64(p)/100)
}

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name        string
		base        int
		floor       int64
		live, roots uint64
		want        int
	}{
		{"small live heap raises it", 100, 16 * mib, 4 * mib, 0, 400},
		{"roots count in the goal", 100, 16 * mib, 3 * mib, 1 * mib, 400},
		{"rounded up, never under the floor", 100, 16 * mib, 6 * mib, 0, 267},
		{"live heap under 4 MiB: the runtime's heap minimum binds", 100, 16 * mib, 3 * mib, 0, 475},
		{"tiny heap: the heap minimum binds", 100, 16 * mib, 1, 0, 401},
		{"a daemon's start: only globals scanned", 100, 16 * mib, 0, 160 << 10, 400},
		{"large live heap: GOGC's goal is higher", 100, 16 * mib, 64 * mib, 0, 100},
		{"operator's GOGC above the floor's", 800, 16 * mib, 4 * mib, 0, 800},
		{"off", 100, 0, 4 * mib, 0, 100},
		{"nothing scanned yet", 100, 16 * mib, 0, 0, 100},
		{"floor of gigabytes: capped", 100, 64 << 30, 4 * mib, 0, maxPercent},
		{"absurd floor: capped, not wrapped around", 100, 1 << 62, 4 * mib, 0, maxPercent},
		{"largest floor: capped, not wrapped around", 100, math.MaxInt64, 1, 0, maxPercent},
	} {
		got := percent(c.base, c.floor, c.live, c.roots)
		if got != c.want {
			t.Errorf("%s: percent(%d, %d, %d, %d) = %d, want %d", c.name, c.base, c.floor, c.live, c.roots, got, c.want)
		}
		// Where the floor raised it, the runtime's goal at got leaves the
		// floor over the live heap, and at got-1 it does not: the least
		// percentage, so the heap grows no more than the floor asks.
		if got <= c.base || got == maxPercent {
			continue
		}
		want := c.live + uint64(c.floor)
		if g := runtimeGoal(got, c.live, c.roots); g < want {
			t.Errorf("%s: goal %d at %d%%, want at least live + floor %d", c.name, g, got, want)
		}
		if g := runtimeGoal(got-1, c.live, c.roots); g >= want {
			t.Errorf("%s: goal %d already at %d%%, so %d%% raises the heap past live + floor %d", c.name, g, got-1, got, want)
		}
	}
}

// TestFloorRaisesGoal runs the floor on this process: after a collection
// the runtime's goal leaves at least the floor's bytes over the live heap,
// and Stop puts the starting percentage back.
func TestFloorRaisesGoal(t *testing.T) {
	const floor = 256 << 20 // far above this test binary's live heap
	base := debug.SetGCPercent(100)
	defer debug.SetGCPercent(base)

	f := Start(Options{Bytes: floor})
	if f == nil {
		t.Fatal("Start returned nil with a floor set and GOGC on")
	}
	if g := Start(Options{Bytes: floor}); g != nil {
		g.Stop()
		f.Stop()
		t.Fatal("a second Start returned a floor while the first runs")
	}
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}, {Name: "/gc/heap/live:bytes"}}
	deadline := time.Now().Add(10 * time.Second)
	ok := false
	for i := 0; i < 200 && time.Now().Before(deadline); i++ {
		runtime.GC() // the cleanup adjusts after the cycle that ran it
		time.Sleep(5 * time.Millisecond)
		metrics.Read(s)
		if goal, live := s[0].Value.Uint64(), s[1].Value.Uint64(); goal >= live+floor {
			ok = true
			break
		}
	}
	metrics.Read(s)
	if !ok {
		t.Fatalf("heap goal %d with %d live, want at least %d over it", s[0].Value.Uint64(), s[1].Value.Uint64(), floor)
	}
	// Nor much more: the floor, not the runtime's heap minimum scaled by
	// a percentage computed for a small live heap, sets the goal.
	if goal, live := s[0].Value.Uint64(), s[1].Value.Uint64(); goal > live+floor+1<<20 {
		t.Errorf("heap goal %d with %d live, want at most %d over it", goal, live, floor+1<<20)
	}

	f.Stop()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("after Stop the GC percentage is %d, want the starting 100", got)
	}
	// A collection after Stop must not raise it again.
	runtime.GC()
	time.Sleep(20 * time.Millisecond)
	runtime.GC()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("a collection after Stop set the GC percentage to %d", got)
	}
}

// TestStopOnce: Stop puts the starting percentage back once. A cleanup
// that passed its check just before Stop adjusts nothing after it, a
// second Stop leaves alone what was set since the first, and the process
// may start a floor again.
func TestStopOnce(t *testing.T) {
	base := debug.SetGCPercent(100)
	defer debug.SetGCPercent(base)
	f := Start(Options{Bytes: 256 << 20})
	if f == nil {
		t.Fatal("Start returned nil with a floor set and GOGC on")
	}
	f.Stop()
	f.adjust() // as the cleanup does when Stop comes between its check and this
	if got := debug.SetGCPercent(150); got != 100 {
		t.Errorf("an adjustment after Stop set the GC percentage to %d, want the starting 100", got)
	}
	f.Stop()
	if got := debug.SetGCPercent(100); got != 150 {
		t.Errorf("a second Stop set the GC percentage to %d, want the 150 set after the first left alone", got)
	}
	g := Start(Options{Bytes: 256 << 20})
	if g == nil {
		t.Fatal("Start after Stop returned nil: the process's floor was not freed")
	}
	g.Stop()
}

func TestStartOff(t *testing.T) {
	base := debug.SetGCPercent(-1)
	defer debug.SetGCPercent(base)
	for _, c := range []struct {
		name  string
		gogc  int
		bytes int64
	}{
		{"GOGC=off", -1, 16 << 20},
		{"no floor", 100, 0},
	} {
		debug.SetGCPercent(c.gogc)
		if f := Start(Options{Bytes: c.bytes}); f != nil {
			f.Stop()
			t.Errorf("%s: Start returned a floor", c.name)
		}
		if got := debug.SetGCPercent(c.gogc); got != c.gogc {
			t.Errorf("%s: GC percentage %d, want %d left alone", c.name, got, c.gogc)
		}
	}
	var f *Floor
	f.Stop() // nil-safe
}
