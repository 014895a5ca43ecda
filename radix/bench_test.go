package radix

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	goradix "github.com/armon/go-radix"
	"github.com/cespare/xxhash/v2"
)

const (
	benchPromptBytes = 8 << 10
	benchSystemBytes = 2 << 10 // shared by every prompt of one "app"
	benchSystems     = 64
)

var benchEndpoints = []string{"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000", "10.0.0.4:8000",
	"10.0.0.5:8000", "10.0.0.6:8000", "10.0.0.7:8000", "10.0.0.8:8000"}

// promptGen makes deterministic 8 KiB prompts: one of 64 system prompts
// followed by a tail unique to i, without keeping them all in memory.
type promptGen struct{ systems [][]byte }

func newPromptGen() *promptGen {
	g := &promptGen{}
	r := rand.New(rand.NewPCG(1, 2))
	for range benchSystems {
		s := make([]byte, benchSystemBytes)
		fillText(r, s)
		g.systems = append(g.systems, s)
	}
	return g
}

func fillText(r *rand.Rand, b []byte) {
	const alphabet = "abcdefghijklmnopqrstuvwxyz      .,\n"
	for i := range b {
		b[i] = alphabet[r.IntN(len(alphabet))]
	}
}

// prompt writes prompt i into buf.
func (g *promptGen) prompt(buf []byte, i int) []byte {
	buf = append(slices.Grow(buf[:0], benchPromptBytes), g.systems[i%benchSystems]...)
	r := rand.New(rand.NewPCG(uint64(i), 7))
	n := len(buf)
	buf = buf[:benchPromptBytes]
	fillText(r, buf[n:])
	return buf
}

func benchIndex(b *testing.B, g *promptGen, stored int) *Index {
	return benchIndexOpts(b, g, stored, DefaultChunkBytes, DefaultSteps)
}

func benchIndexOpts(b *testing.B, g *promptGen, stored, chunk, steps int) *Index {
	b.Helper()
	o := DefaultOptions()
	o.ChunkBytes = chunk
	o.StepsPerDoubling = steps
	o.BudgetBytes = 4 << 30 // nothing evicted: measure the structure at full size
	ix, err := New(o)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, benchPromptBytes)
	for i := range stored {
		ix.Insert(g.prompt(buf, i), benchEndpoints[i%len(benchEndpoints)])
	}
	return ix
}

func p50(samples []time.Duration) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	slices.Sort(samples)
	return samples[len(samples)/2]
}

// sampler times an operation and, interleaved with it, the baseline of
// hashing the same prompt once with XXH64, so the reported ratio
// (x-xxhash) holds on a noisy shared box where absolute numbers do not.
type sampler struct{ op, base []time.Duration }

func newSampler() *sampler {
	return &sampler{op: make([]time.Duration, 0, 1<<16), base: make([]time.Duration, 0, 1<<16)}
}

func (s *sampler) time(q []byte, op func()) {
	if len(s.op) == cap(s.op) {
		op()
		return
	}
	t0 := time.Now()
	op()
	t1 := time.Now()
	_ = xxhash.Sum64(q)
	t2 := time.Now()
	s.op = append(s.op, t1.Sub(t0))
	s.base = append(s.base, t2.Sub(t1))
}

func (s *sampler) report(b *testing.B) {
	op, base := p50(s.op), p50(s.base)
	b.ReportMetric(float64(op.Nanoseconds()), "p50-ns")
	if base > 0 {
		b.ReportMetric(float64(op)/float64(base), "p50-x-xxhash")
	}
}

// BenchmarkMatch: an 8 KiB prompt against 1k..100k stored 8 KiB prompts.
// "diverging" shares its 2 KiB system prompt with stored prompts (walks 16
// boundaries); "exact" repeats a stored prompt (walks all 64); "miss" shares
// nothing. The xxhash line is the floor: hashing the prompt once.
func BenchmarkMatch(b *testing.B) {
	g := newPromptGen()
	for _, stored := range []int{1_000, 10_000, 100_000} {
		ix := benchIndex(b, g, stored)
		queries := map[string][]byte{
			"diverging": g.prompt(nil, stored+1), // system prompt of a stored one, new tail
			"exact":     g.prompt(nil, stored/2),
			"miss":      func() []byte { q := g.prompt(nil, 3); q[0] ^= 0xff; return q }(),
		}
		for _, name := range []string{"diverging", "exact", "miss"} {
			q := queries[name]
			b.Run(fmt.Sprintf("stored=%d/%s", stored, name), func(b *testing.B) {
				s := newSampler()
				for b.Loop() {
					s.time(q, func() { _, _, _ = ix.Match(q, benchEndpoints) })
				}
				s.report(b)
			})
		}
		b.Run(fmt.Sprintf("stored=%d/xxhash-baseline", stored), func(b *testing.B) {
			q := queries["exact"]
			for b.Loop() {
				_ = xxhash.Sum64(q)
			}
		})
		runtime.KeepAlive(ix)
	}
}

// BenchmarkInsert: inserting a new 8 KiB prompt (sharing a system prompt)
// into an index holding 1k..100k prompts.
func BenchmarkInsert(b *testing.B) {
	g := newPromptGen()
	for _, stored := range []int{1_000, 10_000, 100_000} {
		ix := benchIndex(b, g, stored)
		b.Run(fmt.Sprintf("stored=%d", stored), func(b *testing.B) {
			buf := make([]byte, benchPromptBytes)
			s := newSampler()
			i := stored
			for b.Loop() {
				q := g.prompt(buf, i)
				i++
				s.time(q, func() { ix.Insert(q, benchEndpoints[i%len(benchEndpoints)]) })
			}
			s.report(b)
		})
	}
}

// BenchmarkRequest is the per-request work of Tier 1: Match a new 8 KiB
// prompt (sharing a system prompt with stored ones), then Insert it for the
// chosen endpoint, at 1k..100k stored prompts, for the default geometric
// boundaries (128 B chunks, 8 steps per doubling: 32 entries per prompt)
// and the fixed-chunk alternatives (128 B: 64 entries, 256 B: 32). p50-ns
// times only the two calls (prompt generation excluded).
func BenchmarkRequest(b *testing.B) {
	g := newPromptGen()
	configs := []struct {
		name         string
		chunk, steps int
	}{
		{"geometric-128x8", 128, 8},
		{"fixed-128", 128, 0},
		{"fixed-256", 256, 0},
	}
	for _, c := range configs {
		for _, stored := range []int{1_000, 10_000, 100_000} {
			ix := benchIndexOpts(b, g, stored, c.chunk, c.steps)
			b.Run(fmt.Sprintf("%s/stored=%d", c.name, stored), func(b *testing.B) {
				buf := make([]byte, benchPromptBytes)
				s := newSampler()
				i := stored
				for b.Loop() {
					q := g.prompt(buf, i)
					i++
					s.time(q, func() {
						ep, _, ok := ix.Match(q, benchEndpoints)
						if !ok {
							ep = benchEndpoints[i%len(benchEndpoints)]
						}
						ix.Insert(q, ep)
					})
				}
				s.report(b)
			})
		}
	}
}

// BenchmarkMemoryPerPrompt inserts 100k distinct 8 KiB prompts and reports
// the live heap per prompt and per entry next to the accounted figures; it
// fails if the accounted entryBytes undercounts the real heap. It builds the
// index once whatever b.N is (ns/op is meaningless here).
func BenchmarkMemoryPerPrompt(b *testing.B) {
	g := newPromptGen()
	const stored = 100_000
	{
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		ix := benchIndex(b, g, stored)
		runtime.GC()
		runtime.ReadMemStats(&after)
		heap := float64(after.HeapAlloc - before.HeapAlloc)
		s := ix.Stats()
		b.ReportMetric(heap/stored, "heap-B/prompt")
		b.ReportMetric(float64(s.SizeBytes)/stored, "accounted-B/prompt")
		b.ReportMetric(heap/float64(s.Entries), "heap-B/entry")
		b.ReportMetric(float64(s.Entries), "entries")
		if perEntry := heap / float64(s.Entries); perEntry > entryBytes {
			b.Errorf("heap %.1f B/entry exceeds accounted %d", perEntry, entryBytes)
		}
		runtime.KeepAlive(ix)
	}
}

// goRadixIndex is the alternative measured against: armon/go-radix storing
// whole keys, with the longest shared prefix found by binary search over the
// query length using WalkPrefix as an existence test. It has no candidate
// filtering and no byte budget; it only bounds what the structure costs.
type goRadixIndex struct{ t *goradix.Tree }

func (g goRadixIndex) match(q []byte) int {
	lo, hi := 0, len(q)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		found := false
		g.t.WalkPrefix(string(q[:mid]), func(string, any) bool { found = true; return true })
		if found {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// BenchmarkAltGoRadix times the same diverging query against go-radix and
// against Index at 10k stored prompts (100k whole keys would need ~1 GiB),
// interleaved, and reports the heap per prompt of the go-radix tree.
func BenchmarkAltGoRadix(b *testing.B) {
	g := newPromptGen()
	const stored = 10_000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	alt := goRadixIndex{t: goradix.New()}
	for i := range stored {
		alt.t.Insert(string(g.prompt(nil, i)), benchEndpoints[i%len(benchEndpoints)])
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	ix := benchIndex(b, g, stored)
	q := g.prompt(nil, stored+1)
	b.Run("stored=10000/diverging", func(b *testing.B) {
		var altT, ixT []time.Duration
		for b.Loop() {
			t0 := time.Now()
			if alt.match(q) < benchSystemBytes {
				b.Fatal("alternative missed the shared system prompt")
			}
			t1 := time.Now()
			if _, m, _ := ix.Match(q, benchEndpoints); m < benchSystemBytes {
				b.Fatal("index missed the shared system prompt")
			}
			t2 := time.Now()
			if len(altT) < 1<<16 {
				altT, ixT = append(altT, t1.Sub(t0)), append(ixT, t2.Sub(t1))
			}
		}
		a, x := p50(altT), p50(ixT)
		b.ReportMetric(float64(a.Nanoseconds()), "alt-p50-ns")
		b.ReportMetric(float64(a)/float64(x), "alt-x-index")
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/stored, "alt-heap-B/prompt")
	})
}

// BenchmarkRequestParallel runs the per-request Match+Insert from
// GOMAXPROCS goroutines against one 10k-prompt index (one rule under
// concurrent load: readers share the lock, Insert takes it alone). Prompts
// come from a pre-generated pool of 4096 new prompts (cycled), so ns/op is
// the index's cost alone; compare with BenchmarkRequest at 10k.
func BenchmarkRequestParallel(b *testing.B) {
	g := newPromptGen()
	const stored, pool = 10_000, 4096
	ix := benchIndex(b, g, stored)
	prompts := make([][]byte, pool)
	for i := range prompts {
		prompts[i] = g.prompt(nil, stored+i)
	}
	var next atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := int(next.Add(1))
			q := prompts[i%pool]
			ep, _, ok := ix.Match(q, benchEndpoints)
			if !ok {
				ep = benchEndpoints[i%len(benchEndpoints)]
			}
			ix.Insert(q, ep)
		}
	})
}
