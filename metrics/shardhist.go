package metrics

import (
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// HistogramVec is a histogram family for series that every request
// observes, from every core at once: the same exposition as a
// prometheus.HistogramVec with the same options (names, help, labels,
// buckets), with each series kept as histShards independent sets of
// counters, a whole number of cache lines apart, that a scrape adds up.
// (Each shard then has lines of its own when the series' counters start a
// line, which make does not promise: Go's allocator places these sizes,
// multiples of 256 bytes, on 64-byte boundaries, 0 of 3,980 series
// misaligned for 1 to 199 buckets.)
//
// Why: a prometheus.Histogram's observation is a few atomic adds on lines
// every writer shares; with both cores observing the same series (a
// rule's request duration, its time to first byte, ...) each add waits
// for the line to come back from the other core: 24 ns per observation
// from one goroutine, 54-90 ns of CPU from two on two cores
// (docs/performance.md), and a small proxied request makes five. An observation here picks its shard
// from the value's low bits (durations measured in nanoseconds differ
// there), so two cores meet on a shard one time in histShards.
//
// A scrape reads each shard's counters one at a time while observations
// go on, so a series may show an observation in one bucket and not yet in
// the sum: its count is the total of the buckets read, so the buckets and
// the count always agree (what Prometheus checks), and the sum is at most
// the observations in flight behind.
type HistogramVec struct {
	desc    *prometheus.Desc
	labels  []string  // variable label names, in order
	buckets []float64 // upper bounds, increasing, without +Inf
	stride  int       // counters per shard: the buckets, +Inf and the sum, rounded up to whole cache lines

	mu     sync.RWMutex
	series map[string]*Histogram // by label values joined with labelSep
}

// histShards is a power of two.
const histShards = 4

// labelSep joins label values into a series key; label values are UTF-8,
// where 0xff never appears.
const labelSep = "\xff"

// NewHistogramVec is prometheus.NewHistogramVec for a sharded family.
// No buckets (nil or empty) are prometheus.DefBuckets, as there.
func NewHistogramVec(opts prometheus.HistogramOpts, labels []string) *HistogramVec {
	b := opts.Buckets
	if len(b) == 0 {
		b = prometheus.DefBuckets
	}
	b = append([]float64(nil), b...)
	if n := len(b); n > 0 && math.IsInf(b[n-1], 1) {
		b = b[:n-1]
	}
	for i := 1; i < len(b); i++ {
		if b[i] <= b[i-1] {
			panic("metrics: histogram buckets must be in increasing order: " + opts.Name)
		}
	}
	if slices.Contains(labels, "le") {
		panic(`metrics: "le" is a histogram's bucket label, not a variable label: ` + opts.Name) // prometheus refuses it at the first series; here at once
	}
	const line = 8 // uint64 counters per 64-byte cache line
	name := prometheus.BuildFQName(opts.Namespace, opts.Subsystem, opts.Name)
	return &HistogramVec{
		desc:    prometheus.NewDesc(name, opts.Help, labels, opts.ConstLabels),
		labels:  append([]string(nil), labels...),
		buckets: b,
		stride:  (len(b) + 2 + line - 1) / line * line,
		series:  map[string]*Histogram{},
	}
}

// Histogram is one series of a HistogramVec: a prometheus.Observer, and a
// prometheus.Metric that reads as the shards' total.
type Histogram struct {
	v      *HistogramVec
	values []string
	// counts holds histShards runs of v.stride counters: per bucket, then
	// +Inf, then the sum's float64 bits.
	counts []atomic.Uint64
	// bounds and stride are v's buckets and stride, here so that an
	// observation reads them from the series it has loaded already.
	bounds []float64
	stride int
}

// WithLabelValues returns the series of the label values lvs (made on
// first use), as prometheus.HistogramVec's does; it panics on a wrong
// number of values or a value that is not UTF-8, as that one does (a
// scrape would fail on it later).
func (v *HistogramVec) WithLabelValues(lvs ...string) prometheus.Observer {
	return v.get(lvs)
}

// Series is WithLabelValues as the series itself, for a caller that keeps
// it: its Observe is then a direct call, not one through an interface.
func (v *HistogramVec) Series(lvs ...string) *Histogram {
	return v.get(lvs)
}

func (v *HistogramVec) get(lvs []string) *Histogram {
	if len(lvs) != len(v.labels) {
		panic("metrics: " + v.desc.String() + ": wrong number of label values")
	}
	var kb [128]byte
	k := appendKey(kb[:0], lvs)
	v.mu.RLock()
	h := v.series[string(k)]
	v.mu.RUnlock()
	if h != nil {
		return h
	}
	for _, s := range lvs {
		if !utf8.ValidString(s) {
			panic("metrics: " + v.desc.String() + ": label value " + strconv.Quote(s) + " is not valid UTF-8")
		}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if h = v.series[string(k)]; h == nil {
		h = &Histogram{v: v, values: append([]string(nil), lvs...), counts: make([]atomic.Uint64, histShards*v.stride), bounds: v.buckets, stride: v.stride}
		v.series[string(k)] = h
	}
	return h
}

// appendKey appends the series key of lvs to b: the one spelling of a
// key, for get and Delete.
func appendKey(b []byte, lvs []string) []byte {
	for i, s := range lvs {
		if i > 0 {
			b = append(b, labelSep...)
		}
		b = append(b, s...)
	}
	return b
}

// Observe adds x to the series: one bucket's count and the sum, in the
// shard x's low bits choose.
func (h *Histogram) Observe(x float64) {
	bits := math.Float64bits(x)
	base := int((bits^bits>>17)&(histShards-1)) * h.stride
	b := h.bounds
	var i int
	if len(b) < longBounds {
		i = scanBucket(b, x) // inlined: a call here was a third of an observation
	} else {
		i = sort.SearchFloat64s(b, x)
	}
	h.counts[base+i].Add(1)
	sum := &h.counts[base+len(b)+1]
	for {
		old := sum.Load()
		if sum.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+x)) {
			return
		}
	}
}

// longBounds is the length from which Observe searches a bound list
// instead of scanning it, as prometheus's own histograms do.
const longBounds = 35

// scanBucket is the index of the first bound ≥ x (len(b): +Inf) by a
// linear scan, Observe's for the usual short lists; !(x <= u) puts NaN in
// +Inf, as sort.SearchFloat64s does for the long ones. Small enough to be
// inlined into Observe.
func scanBucket(b []float64, x float64) int {
	i := 0
	for i < len(b) && !(x <= b[i]) {
		i++
	}
	return i
}

// Desc is the family's.
func (h *Histogram) Desc() *prometheus.Desc { return h.v.desc }

// Write writes the shards' total, as a prometheus.Histogram of the same
// observations would.
func (h *Histogram) Write(m *dto.Metric) error { return h.snapshot().Write(m) }

// snapshot is the series as a constant histogram: each bucket's count
// summed over the shards, cumulated; the count is the buckets' total.
func (h *Histogram) snapshot() prometheus.Metric {
	nb := len(h.v.buckets)
	per := make([]uint64, nb+1)
	var sum float64
	for s := range histShards {
		c := h.counts[s*h.v.stride:]
		for i := range per {
			per[i] += c[i].Load()
		}
		sum += math.Float64frombits(c[nb+1].Load())
	}
	cum := make(map[float64]uint64, nb)
	var n uint64
	for i, b := range h.v.buckets {
		n += per[i]
		cum[b] = n
	}
	n += per[nb]
	return prometheus.MustNewConstHistogram(h.v.desc, n, sum, cum, h.values...)
}

// Describe sends the family's one description.
func (v *HistogramVec) Describe(ch chan<- *prometheus.Desc) { ch <- v.desc }

// Collect sends every series' total.
func (v *HistogramVec) Collect(ch chan<- prometheus.Metric) {
	v.mu.RLock()
	all := slices.Collect(maps.Values(v.series)) // snapshot: observers are not held up by a scrape
	v.mu.RUnlock()
	for _, h := range all {
		ch <- h.snapshot()
	}
}

// Delete drops the series whose labels are exactly ls; false when there
// was none.
func (v *HistogramVec) Delete(ls prometheus.Labels) bool {
	if len(ls) != len(v.labels) {
		return false
	}
	lvs := make([]string, len(v.labels))
	for i, name := range v.labels {
		val, ok := ls[name]
		if !ok {
			return false
		}
		lvs[i] = val
	}
	k := string(appendKey(nil, lvs))
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.series[k]; !ok {
		return false
	}
	delete(v.series, k)
	return true
}

// DeletePartialMatch drops every series whose labels include ls, and
// returns how many.
func (v *HistogramVec) DeletePartialMatch(ls prometheus.Labels) int {
	idx := make(map[int]string, len(ls))
	for name, val := range ls {
		i := slices.Index(v.labels, name)
		if i < 0 {
			return 0 // a label the family does not have matches nothing
		}
		idx[i] = val
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	n := 0
	for k, h := range v.series {
		match := true
		for i, val := range idx {
			if h.values[i] != val {
				match = false
				break
			}
		}
		if match {
			delete(v.series, k)
			n++
		}
	}
	return n
}
