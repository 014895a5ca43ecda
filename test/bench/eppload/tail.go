package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The tail analysis (-tail) asks what the slowest picks waited on, with
// evidence rather than a guess: which picks overlapped one of the EPP's
// garbage-collection cycles (their wall-clock spans from the runtime's own
// records), how long the EPP's and the driver's threads sat on a
// run queue waiting for a CPU (the kernel's schedstat, which counts the
// machine's neighbours), and how long the EPP's goroutines waited for a P
// (the Go scheduler's latency histogram).

// pickRec is one measured pick: when its headers were sent and how long
// the pick took to come back.
type pickRec struct {
	start int64 // unix nanoseconds
	lat   time.Duration
	wait  int64 // with -waits: the longest run-queue wait of one of both processes' threads during the pick
}

// gcCycle is one finished collection of the EPP: its number, as gctrace
// counts, and the wall-clock end of its mark termination.
type gcCycle struct {
	N   uint32 `json:"n"`
	End int64  `json:"end_unix_ns"`
}

// gcCycles lists the collections the runtime still remembers (its last
// 256), oldest first.
func gcCycles() []gcCycle {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	var out []gcCycle
	for n := ms.NumGC - min(ms.NumGC, 255); n < ms.NumGC; n++ {
		// Cycle n+1 (gctrace's number) ended at PauseEnd[n%256].
		out = append(out, gcCycle{N: n + 1, End: int64(ms.PauseEnd[n%256])})
	}
	return out
}

// hist is a runtime/metrics histogram as JSON can carry it (infinite
// bucket edges clamped).
type hist struct {
	Counts  []uint64  `json:"counts"`
	Buckets []float64 `json:"buckets"`
}

func toHist(h *metrics.Float64Histogram) hist {
	b := make([]float64, len(h.Buckets))
	for i, v := range h.Buckets {
		b[i] = max(min(v, 1e9), -1e9)
	}
	return hist{Counts: slices.Clone(h.Counts), Buckets: b}
}

// quantile of the difference after-before (same buckets), as the upper
// edge of the bucket it falls in; 0 when empty.
func (after hist) quantile(before hist, q float64) float64 {
	if len(before.Counts) != len(after.Counts) {
		before = hist{Counts: make([]uint64, len(after.Counts))}
	}
	var total uint64
	for i := range after.Counts {
		total += after.Counts[i] - before.Counts[i]
	}
	if total == 0 {
		return 0
	}
	want := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for i := range after.Counts {
		seen += after.Counts[i] - before.Counts[i]
		if seen >= want {
			return after.Buckets[i+1]
		}
	}
	return after.Buckets[len(after.Buckets)-1]
}

// count of the difference at or above edge seconds.
func (after hist) countAbove(before hist, edge float64) uint64 {
	if len(before.Counts) != len(after.Counts) {
		before = hist{Counts: make([]uint64, len(after.Counts))}
	}
	var n uint64
	for i := range after.Counts {
		if after.Buckets[i] >= edge {
			n += after.Counts[i] - before.Counts[i]
		}
	}
	return n
}

// runDelay is the time all of a process's threads have spent runnable but
// waiting for a CPU, and their count of time slices, from
// /proc/<pid>/task/*/schedstat (threads that exited are not counted, which
// a window's long-lived threads make small).
func runDelay(pid int) (time.Duration, uint64, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(tasks) == 0 {
		return 0, 0, fmt.Errorf("schedstat of %d: %v", pid, err)
	}
	var wait, slices uint64
	for _, p := range tasks {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the thread exited
		}
		f := strings.Fields(string(b))
		if len(f) < 3 {
			continue
		}
		w, _ := strconv.ParseUint(f[1], 10, 64)
		s, _ := strconv.ParseUint(f[2], 10, 64)
		wait += w
		slices += s
	}
	return time.Duration(wait), slices, nil
}

// gcTrace collects the wall-clock length of each collection from the
// EPP's GODEBUG=gctrace=1 lines ("gc 12 @3.4s 4%: 0.03+2.1+0.02 ms clock,
// …"), passing every other line on.
type gcTrace struct {
	mu  sync.Mutex
	dur map[uint32]time.Duration
}

func (g *gcTrace) read(r io.Reader, pass io.Writer) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		n, d, ok := parseGCTrace(line)
		if !ok {
			fmt.Fprintln(pass, line)
			continue
		}
		g.mu.Lock()
		if g.dur == nil {
			g.dur = map[uint32]time.Duration{}
		}
		g.dur[n] = d
		g.mu.Unlock()
	}
}

func parseGCTrace(line string) (uint32, time.Duration, bool) {
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "gc" {
		return 0, 0, false
	}
	n, err := strconv.ParseUint(f[1], 10, 32)
	if err != nil {
		return 0, 0, false
	}
	for i := 3; i+2 < len(f); i++ {
		if f[i+1] != "ms" || !strings.HasPrefix(f[i+2], "clock") {
			continue
		}
		var ms float64
		for _, p := range strings.Split(f[i], "+") {
			v, err := strconv.ParseFloat(p, 64)
			if err != nil {
				return 0, 0, false
			}
			ms += v
		}
		return uint32(n), time.Duration(ms * float64(time.Millisecond)), true
	}
	return 0, 0, false
}

// span is a wall-clock interval in unix nanoseconds.
type span struct{ from, to int64 }

// gcSpans pairs each cycle's end with its gctrace length.
func (g *gcTrace) spans(cycles []gcCycle) []span {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []span
	for _, c := range cycles {
		if d, ok := g.dur[c.N]; ok && c.End > 0 {
			out = append(out, span{c.End - int64(d), c.End})
		}
	}
	return out
}

// tailReport is what -tail adds to a run's report.
type tailReport struct {
	SlowPicks        int     `json:"picks_over_1ms"`
	GCCycles         int     `json:"gc_cycles_in_window"`
	GCBusy           float64 `json:"gc_wall_fraction"`     // of the window, some collection was running
	PicksInGC        float64 `json:"picks_overlapping_gc"` // fraction of all picks
	SlowestInGC      float64 `json:"slowest_1pct_overlapping_gc"`
	P99NoGC          float64 `json:"p99_us_picks_not_overlapping_gc"`
	P99InGC          float64 `json:"p99_us_picks_overlapping_gc"`
	EPPRunWait       float64 `json:"epp_runqueue_wait_us_per_pick"`
	DriverRunWait    float64 `json:"driver_runqueue_wait_us_per_pick"`
	EPPSlices        float64 `json:"epp_timeslices_per_pick"`
	SchedP99         float64 `json:"epp_goroutine_sched_latency_p99_us"`
	SchedP999        float64 `json:"epp_goroutine_sched_latency_p999_us"`
	SchedOver1ms     uint64  `json:"epp_goroutine_waits_over_1ms"`
	GCPauseP99       float64 `json:"epp_gc_stw_pause_p99_us"`
	GCCPUFraction    float64 `json:"epp_gc_cpu_fraction"`
	AssistCPUPerPick float64 `json:"epp_gc_assist_cpu_us_per_pick"`
	MutexWaitPerPick float64 `json:"epp_mutex_wait_us_per_pick"`
}

// analyse relates the measured picks to the EPP's collections.
func analyseTail(recs []pickRec, spans []span, from, to int64) tailReport {
	var t tailReport
	spans = slices.DeleteFunc(spans, func(s span) bool { return s.to < from || s.from > to })
	t.GCCycles = len(spans)
	var busy int64
	for _, s := range spans {
		busy += min(s.to, to) - max(s.from, from)
	}
	if to > from {
		t.GCBusy = float64(busy) / float64(to-from)
	}
	slices.SortFunc(recs, func(a, b pickRec) int { return int(a.lat - b.lat) })
	inGC := func(r pickRec) bool {
		end := r.start + int64(r.lat)
		for _, s := range spans {
			if r.start < s.to && end > s.from {
				return true
			}
		}
		return false
	}
	var in, out []time.Duration
	slowFrom := len(recs) - max(1, len(recs)/100)
	var slowIn int
	for i, r := range recs {
		if r.lat >= time.Millisecond {
			t.SlowPicks++
		}
		g := inGC(r)
		if g {
			in = append(in, r.lat)
		} else {
			out = append(out, r.lat)
		}
		if i >= slowFrom && g {
			slowIn++
		}
	}
	if len(recs) > 0 {
		t.PicksInGC = float64(len(in)) / float64(len(recs))
		t.SlowestInGC = float64(slowIn) / float64(len(recs)-slowFrom)
	}
	p99 := func(l []time.Duration) float64 {
		if len(l) == 0 {
			return 0
		}
		return us(l[min(len(l)-1, int(0.99*float64(len(l))))])
	}
	t.P99NoGC, t.P99InGC = p99(out), p99(in)
	return t
}

func (t *tailReport) print(w io.Writer) {
	fmt.Fprintf(w, "  tail: %d picks ≥ 1 ms; %d GC cycles in the window, running %.1f %% of it; %.1f %% of picks overlap one, %.0f %% of the slowest 1 %%\n",
		t.SlowPicks, t.GCCycles, 100*t.GCBusy, 100*t.PicksInGC, 100*t.SlowestInGC)
	fmt.Fprintf(w, "  tail: p99 of picks clear of GC %.0f µs, of picks overlapping GC %.0f µs; GC STW pause p99 %.0f µs; GC %.1f %% of the EPP's CPU, assists %.1f µs per pick\n",
		t.P99NoGC, t.P99InGC, t.GCPauseP99, 100*t.GCCPUFraction, t.AssistCPUPerPick)
	fmt.Fprintf(w, "  tail: run-queue wait per pick (kernel schedstat): EPP %.0f µs over %.1f time slices, driver %.0f µs; EPP goroutines waiting for a P: p99 %.0f µs, p99.9 %.0f µs, %d waits ≥ 1 ms; blocked on mutexes %.1f µs per pick\n",
		t.EPPRunWait, t.EPPSlices, t.DriverRunWait, t.SchedP99, t.SchedP999, t.SchedOver1ms, t.MutexWaitPerPick)
}

// threadWaits reads, per pick, how long the EPP's and the driver's threads
// have waited on a run queue so far: the threads' schedstat files are
// opened once and re-read in place (procfs regenerates them on each read
// at offset 0). Threads started after open are not seen; at one stream the
// Go runtime has made all it needs during the warm-up.
type threadWaits struct {
	files []*os.File
	buf   [128]byte
}

func openThreadWaits(pids ...int) (*threadWaits, error) {
	t := &threadWaits{}
	for _, pid := range pids {
		tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
		if err != nil {
			return nil, err
		}
		for _, p := range tasks {
			f, err := os.Open(p)
			if err != nil {
				continue
			}
			t.files = append(t.files, f)
		}
	}
	if len(t.files) == 0 {
		return nil, fmt.Errorf("no schedstat for %v", pids)
	}
	return t, nil
}

// read fills into with each opened thread's run-queue wait so far, in
// nanoseconds (into must have one slot per file).
func (t *threadWaits) read(into []int64) {
	for i, f := range t.files {
		n, err := f.ReadAt(t.buf[:], 0)
		if n == 0 && err != nil {
			continue
		}
		_, rest, _ := strings.Cut(string(t.buf[:n]), " ")
		w, _, _ := strings.Cut(rest, " ")
		into[i], _ = strconv.ParseInt(w, 10, 64)
	}
}

// longest is the largest growth of one thread's wait between before and
// after: threads waiting side by side (a spinning scheduler thread beside
// the one carrying the pick) do not add up, so this is what the pick can
// have waited at least, if its thread was the one.
func longest(before, after []int64) int64 {
	var m int64
	for i := range after {
		m = max(m, after[i]-before[i])
	}
	return m
}

func (t *threadWaits) close() {
	for _, f := range t.files {
		f.Close()
	}
}

// waitReport relates each pick's latency to the run-queue wait of both
// processes' threads during it.
type waitReport struct {
	Threads        int     `json:"threads"`
	MedianWaitAll  float64 `json:"median_wait_us_all_picks"`
	MedianWaitSlow float64 `json:"median_wait_us_slowest_1pct"`
	SlowMostlyWait float64 `json:"slowest_1pct_with_wait_over_half"`
	AllMostlyWait  float64 `json:"all_with_wait_over_half"`
	P99Excess      float64 `json:"p99_us_of_latency_minus_wait"`
}

func analyseWaits(recs []pickRec, threads int) waitReport {
	r := waitReport{Threads: threads}
	if len(recs) == 0 {
		return r
	}
	slices.SortFunc(recs, func(a, b pickRec) int { return int(a.lat - b.lat) })
	med := func(l []pickRec) float64 {
		w := make([]int64, len(l))
		for i, p := range l {
			w[i] = p.wait
		}
		slices.Sort(w)
		return float64(w[len(w)/2]) / 1e3
	}
	slow := recs[len(recs)-max(1, len(recs)/100):]
	r.MedianWaitAll, r.MedianWaitSlow = med(recs), med(slow)
	var n int
	for _, p := range slow {
		if 2*p.wait > int64(p.lat) {
			n++
		}
	}
	r.SlowMostlyWait = float64(n) / float64(len(slow))
	n = 0
	for _, p := range recs {
		if 2*p.wait > int64(p.lat) {
			n++
		}
	}
	r.AllMostlyWait = float64(n) / float64(len(recs))
	ex := make([]int64, len(recs))
	for i, p := range recs {
		ex[i] = max(0, int64(p.lat)-p.wait)
	}
	slices.Sort(ex)
	r.P99Excess = float64(ex[min(len(ex)-1, int(0.99*float64(len(ex))))]) / 1e3
	return r
}

func (r *waitReport) print(w io.Writer) {
	fmt.Fprintf(w, "  waits (%d threads' schedstat per pick): longest run-queue wait of one thread during a pick, median %.0f µs; slowest 1 %%: median %.0f µs, %.0f %% waited more than half their latency (of all picks %.0f %%); p99 of latency minus wait %.0f µs\n",
		r.Threads, r.MedianWaitAll, r.MedianWaitSlow, 100*r.SlowMostlyWait, 100*r.AllMostlyWait, r.P99Excess)
}
