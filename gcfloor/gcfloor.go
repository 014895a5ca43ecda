// Package gcfloor keeps the garbage collector from running more often than
// a small live heap makes it: the heap may gather at least a fixed number
// of bytes of garbage between two collections.
//
// Why: the runtime sets the next collection at GOGC percent (100 by
// default) over the heap that survived the last one. A gateway's live heap
// is a few MiB (rules, pools, metrics), and each proxied request leaves a
// few KiB of garbage, so at the default the collector ran every ~1,700
// requests and its marking, sweeping and assists took ~5 % of the
// gateway's CPU, more than the handler's own code (docs/performance.md,
// "Session 12: the collector's share, …"). The cost
// of a cycle follows the live heap, not the garbage, so letting more
// garbage gather while the live heap is small cuts that cost by the same
// factor; once the live heap is large (thousands of open streams) GOGC's
// own goal is the higher one and the floor does nothing.
//
// The floor only ever raises the runtime's percentage above the one the
// process started with (GOGC); GOGC=off turns it off, and a memory limit
// (GOMEMLIMIT) still makes the runtime collect sooner when it is reached.
package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// Options is the floor's one knob.
type Options struct {
	// Bytes is the least garbage the heap may gather between two
	// collections while the live heap is small (0: off, GOGC alone).
	Bytes int64 `yaml:"gc-heap-floor"`
}

// DefaultOptions is a 16 MiB floor: at ~2.7 KiB of garbage per small
// request, a collection every ~5,000 requests instead of every ~1,700
// (measured), for at most 16 MiB more heap between collections.
func DefaultOptions() Options { return Options{Bytes: 16 << 20} }

// The runtime figures the percentage is computed from: the runtime sets
// its goal at live + (live + stacks + globals) × GOGC / 100, and never
// under heapMinimum × GOGC / 100.
var sampleNames = [...]string{
	"/gc/heap/live:bytes",
	"/gc/scan/stack:bytes",
	"/gc/scan/globals:bytes",
}

// active is set while a Floor runs. It is package state, which the house
// otherwise keeps out, because what it guards is the process's own: the
// runtime has one GC percentage, so a second Floor (several daemons in one
// test binary) would read the first one's raised percentage as its base
// and restore that on Stop, leaving GOGC raised for good. Start and Stop
// are its only writers.
var active atomic.Bool

// Floor adjusts the runtime's GC percentage after every collection.
type Floor struct {
	bytes   int64
	base    int // the percentage the process started with
	stopped atomic.Bool
	mu      sync.Mutex // one adjustment at a time (Stop against a cleanup)
	samples [len(sampleNames)]metrics.Sample
}

// Start applies o to the process until Stop. It returns nil (nothing to
// stop) when the floor is off, the process runs with GOGC=off, or
// another Floor runs: the GC percentage is the process's.
func Start(o Options) *Floor {
	if o.Bytes <= 0 || !active.CompareAndSwap(false, true) {
		return nil
	}
	base := debug.SetGCPercent(100)
	debug.SetGCPercent(base)
	if base < 0 {
		active.Store(false)
		return nil
	}
	f := &Floor{bytes: o.Bytes, base: base}
	for i, n := range sampleNames {
		f.samples[i].Name = n
	}
	f.adjust()
	f.arm()
	return f
}

// Stop restores the percentage the process started with; the next
// collection's cleanup ends the floor's chain. Safe on a nil Floor.
func (f *Floor) Stop() {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped.Swap(true) {
		return
	}
	debug.SetGCPercent(f.base)
	active.Store(false)
}

// cycleMark is garbage made to learn when a collection has run: its
// cleanup runs after the cycle that found it unreachable. Larger than the
// runtime's tiny-allocation size, so it is never batched with another
// object that stays alive.
type cycleMark struct{ _ [32]byte }

// arm makes a new mark whose cleanup adjusts the percentage and arms the
// next one.
func (f *Floor) arm() {
	runtime.AddCleanup(new(cycleMark), func(f *Floor) {
		if f.stopped.Load() {
			return
		}
		f.adjust()
		f.arm()
	}, f)
}

// adjust sets the percentage for the live heap the last collection left.
func (f *Floor) adjust() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped.Load() {
		return
	}
	metrics.Read(f.samples[:])
	var v [len(sampleNames)]uint64
	for i, s := range f.samples {
		if s.Value.Kind() == metrics.KindUint64 {
			v[i] = s.Value.Uint64()
		}
	}
	debug.SetGCPercent(percent(f.base, f.bytes, v[0], v[1]+v[2]))
}

// maxPercent bounds the percentage for floors of gigabytes (the runtime
// takes it as an int32; its heap minimum at this figure is 4 GiB).
const maxPercent = 100_000

// maxFloor is the largest floor percent computes with (1 PiB): a larger
// one gets maxPercent all the same, and f × 100 must fit in 64 bits.
const maxFloor = 1 << 50

// heapMinimum is the runtime's least heap goal at GOGC=100 (its
// unexported defaultHeapMinimum, 4 MiB). The runtime scales it with the
// percentage: at percentage p no goal is under 4 MiB × p / 100. Why it
// matters: with a live heap under ~4 MiB the percentage that leaves the
// floor over the scanned bytes alone would make that minimum the goal, far
// past live + floor (150 MiB at a daemon's start, before its first
// collection, where the scanned bytes are only the globals). A runtime
// built with GOEXPERIMENT=heapminimum512kib has 512 KiB there: below
// ~4 MiB of live heap the floor then falls short instead of overshooting.
const heapMinimum = 4 << 20

// percent is the least GC percentage whose heap goal lets at least floor
// bytes of garbage gather over a live heap of live bytes with roots
// (stacks and globals) of roots bytes, and never less than base. The
// runtime's goal is the larger of live + (live + roots) × p / 100 and
// heapMinimum × p / 100; both grow with p, so the least p is the smaller
// of the two that each reach live + floor.
func percent(base int, floor int64, live, roots uint64) int {
	scanned := live + roots
	if floor <= 0 || scanned == 0 {
		return base
	}
	// × 100 below must not wrap.
	f := min(uint64(floor), maxFloor)
	byScan := (f*100 + scanned - 1) / scanned               // rounded up
	byMin := ((live+f)*100 + heapMinimum - 1) / heapMinimum // rounded up
	p := min(byScan, byMin, maxPercent)
	return max(int(p), base)
}
