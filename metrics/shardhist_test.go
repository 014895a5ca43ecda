package metrics

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// deleter is what both vector types offer to drop series.
type deleter interface {
	Delete(prometheus.Labels) bool
	DeletePartialMatch(prometheus.Labels) int
}

// TestHistogramVecExposition: a HistogramVec exposes exactly what a
// prometheus.HistogramVec with the same options exposes for the same
// observations (values on and between bounds, past the last, zero,
// several series, deleted series), so the families keep their names,
// labels, buckets and values when they move to it.
func TestHistogramVecExposition(t *testing.T) {
	opts := prometheus.HistogramOpts{Name: "infergate_test_seconds", Help: "A test family.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18)}
	labels := []string{"rule", "model"}
	ours, theirs := NewHistogramVec(opts, labels), prometheus.NewHistogramVec(opts, labels)
	regOurs, regTheirs := prometheus.NewRegistry(), prometheus.NewRegistry()
	regOurs.MustRegister(ours)
	regTheirs.MustRegister(theirs)

	values := []float64{0, 0.0005, 0.0007, 0.001, 0.0123456789, 1.5, 65.536, 1e6, 3.25e-7}
	for i, v := range values {
		for _, lvs := range [][]string{{"r1", "m"}, {"r1", "other"}, {"r2", "m"}, {"r3", "m"}} {
			for range i + 1 {
				ours.WithLabelValues(lvs...).Observe(v)
				theirs.WithLabelValues(lvs...).Observe(v)
			}
		}
	}
	sameExposition(t, "after the observations", exposition(t, regOurs, opts.Name), exposition(t, regTheirs, opts.Name))

	for _, step := range []struct {
		name string
		do   func(v deleter) int
	}{
		{"delete one", func(v deleter) int {
			if v.Delete(prometheus.Labels{"rule": "r3", "model": "m"}) {
				return 1
			}
			return 0
		}},
		{"delete a missing one", func(v deleter) int {
			if v.Delete(prometheus.Labels{"rule": "r9", "model": "m"}) {
				return 1
			}
			return 0
		}},
		{"delete a rule's", func(v deleter) int {
			return v.DeletePartialMatch(prometheus.Labels{"rule": "r1"})
		}},
		{"unknown label", func(v deleter) int {
			return v.DeletePartialMatch(prometheus.Labels{"endpoint": "r2"})
		}},
	} {
		if got, want := step.do(ours), step.do(theirs); got != want {
			t.Errorf("%s: %d deleted, prometheus.HistogramVec %d", step.name, got, want)
		}
		sameExposition(t, step.name, exposition(t, regOurs, opts.Name), exposition(t, regTheirs, opts.Name))
	}
}

// TestHistogramVecDefaultBuckets: options without buckets, nil or empty,
// give prometheus.HistogramVec's default buckets.
func TestHistogramVecDefaultBuckets(t *testing.T) {
	for _, b := range [][]float64{nil, {}} {
		opts := prometheus.HistogramOpts{Name: "infergate_test_seconds", Help: "h", Buckets: b}
		ours, theirs := NewHistogramVec(opts, []string{"rule"}), prometheus.NewHistogramVec(opts, []string{"rule"})
		regOurs, regTheirs := prometheus.NewRegistry(), prometheus.NewRegistry()
		regOurs.MustRegister(ours)
		regTheirs.MustRegister(theirs)
		ours.WithLabelValues("r").Observe(0.3)
		theirs.WithLabelValues("r").Observe(0.3)
		sameExposition(t, fmt.Sprintf("buckets %#v", b), exposition(t, regOurs, opts.Name), exposition(t, regTheirs, opts.Name))
	}
}

// sameExposition fails unless got and want have the same lines, but for
// the _sum values, which may differ in their last bits: the shards' sums
// are added in another order than one running sum.
func sameExposition(t *testing.T, when, got, want string) {
	t.Helper()
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	if len(g) != len(w) {
		t.Fatalf("%s: %d lines, prometheus.HistogramVec %d:\n%s\n---\n%s", when, len(g), len(w), got, want)
	}
	for i := range g {
		if g[i] == w[i] {
			continue
		}
		gk, gv, _ := strings.Cut(g[i], "} ")
		wk, wv, _ := strings.Cut(w[i], "} ")
		a, errA := strconv.ParseFloat(gv, 64)
		b, errB := strconv.ParseFloat(wv, 64)
		if gk != wk || !strings.Contains(gk, "_sum{") || errA != nil || errB != nil || math.Abs(a-b) > 1e-12*math.Abs(b) {
			t.Fatalf("%s: line %d is %q, prometheus.HistogramVec's %q", when, i, g[i], w[i])
		}
	}
}

// TestHistogramVecConcurrent: series observed from several goroutines
// while they are scraped always expose buckets that rise and end at the
// count, and at the end the totals of every observation.
func TestHistogramVecConcurrent(t *testing.T) {
	v := NewHistogramVec(prometheus.HistogramOpts{Name: "infergate_test_seconds", Help: "h", Buckets: []float64{0.001, 0.01, 0.1}}, []string{"rule"})
	reg := prometheus.NewRegistry()
	reg.MustRegister(v)
	const workers, each = 4, 2000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := v.WithLabelValues("r")
			for i := range each {
				o.Observe(float64(w*each+i) * 1e-5) // 0 to 0.08: every bucket but +Inf
			}
		}()
	}
	check := func() (count uint64, sum float64) {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				h := m.GetHistogram()
				var last uint64
				for _, b := range h.GetBucket() {
					if b.GetCumulativeCount() < last {
						t.Fatalf("buckets fall: %v", h)
					}
					last = b.GetCumulativeCount()
				}
				if last != h.GetSampleCount() { // every value is in the last bucket's range
					t.Fatalf("the last bucket is not the count: %v", h)
				}
				count, sum = h.GetSampleCount(), h.GetSampleSum()
			}
		}
		return count, sum
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for scraping := true; scraping; {
		select {
		case <-done:
			scraping = false
		default:
			check()
		}
	}
	count, sum := check()
	want := 0.0
	for i := range workers * each {
		want += float64(i) * 1e-5
	}
	if count != workers*each || math.Abs(sum-want) > 1e-6*want {
		t.Errorf("count %d sum %g, want %d and %g", count, sum, workers*each, want)
	}
}

// BenchmarkHistogramObserve is one series observed from every core at
// once (-cpu 1,2 shows the contention), by a prometheus.Histogram and by a
// HistogramVec's series.
func BenchmarkHistogramObserve(b *testing.B) {
	opts := prometheus.HistogramOpts{Name: "infergate_test_seconds", Help: "h", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18)}
	for _, tc := range []struct {
		name string
		o    prometheus.Observer
	}{
		{"prometheus", prometheus.NewHistogramVec(opts, []string{"rule"}).WithLabelValues("r")},
		{"sharded", NewHistogramVec(opts, []string{"rule"}).WithLabelValues("r")},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				x := 0.0123456789
				for pb.Next() {
					tc.o.Observe(x)
					x += 1.1e-9 // durations differ in their low bits
				}
			})
		})
	}
}

// TestHistogramVecRefusesLeLabel: "le" names a histogram's buckets, so a
// family with a variable label "le" is refused at once (prometheus
// panics at its first series).
func TestHistogramVecRefusesLeLabel(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal(`NewHistogramVec took a variable label "le"`)
		}
	}()
	NewHistogramVec(prometheus.HistogramOpts{Name: "x_seconds", Help: "x"}, []string{"rule", "le"})
}

// TestObserveBucket: Observe counts each value in the first bucket whose
// bound is ≥ it (+Inf for NaN), by its scan of short bound lists and its
// binary search of long ones (35 and more), at the bounds, and NaN and
// the infinities.
func TestObserveBucket(t *testing.T) {
	for _, n := range []int{1, 18, 34, 35, 40} {
		b := prometheus.LinearBuckets(1, 1, n)
		for _, x := range []float64{math.Inf(-1), -1, 0, 1, 1.5, 2, float64(n) - 0.5, float64(n), float64(n) + 0.5, math.Inf(1), math.NaN()} {
			h := NewHistogramVec(prometheus.HistogramOpts{Name: "x_seconds", Help: "x", Buckets: b}, []string{"rule"}).get([]string{"r"})
			h.Observe(x)
			want := n // +Inf, and NaN, which no bound is ≥
			for i, u := range b {
				if x <= u {
					want = i
					break
				}
			}
			got := -1
			for s := range histShards {
				for i := range n + 1 {
					if h.counts[s*h.stride+i].Load() != 0 {
						got = i
					}
				}
			}
			if got != want {
				t.Errorf("%d bounds, %g: counted in bucket %d, want %d", n, x, got, want)
			}
		}
	}
}

// TestHistogramVecSeries: Series is the series WithLabelValues returns (made
// on first use, the same one after), and what is observed through it is
// exposed as a prometheus.HistogramVec exposes the same observations.
func TestHistogramVecSeries(t *testing.T) {
	opts := prometheus.HistogramOpts{Name: "infergate_test_seconds", Help: "A test family.", Buckets: []float64{0.1, 0.25, 1}}
	labels := []string{"rule", "model"}
	ours, theirs := NewHistogramVec(opts, labels), prometheus.NewHistogramVec(opts, labels)
	regOurs, regTheirs := prometheus.NewRegistry(), prometheus.NewRegistry()
	regOurs.MustRegister(ours)
	regTheirs.MustRegister(theirs)
	h := ours.Series("r1", "m")
	if ours.Series("r1", "m") != h || ours.WithLabelValues("r1", "m") != prometheus.Observer(h) {
		t.Fatal("Series and WithLabelValues name different series for the same labels")
	}
	for _, v := range []float64{0, 0.1, 0.2, 0.25, 3, 1e-9} {
		h.Observe(v)
		theirs.WithLabelValues("r1", "m").Observe(v)
	}
	sameExposition(t, "after the observations", exposition(t, regOurs, opts.Name), exposition(t, regTheirs, opts.Name))
}
