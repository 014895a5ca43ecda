package chwbl

import (
	"slices"
	"testing"
	"time"
)

// BenchmarkPick: 32 endpoints × 100 vnodes. Each b.Loop iteration times a
// batch of 256 Picks and, interleaved, 256 picks of the baseline
// (hash % n, LoxiLB's sel 9, with the same eligibility and load reads), so
// x-modulo holds on a noisy shared box. Pick must not allocate.
func BenchmarkPick(b *testing.B) {
	const n, batch = 32, 256
	r := mustRing(b, members(n), DefaultOptions())
	ks := keys(batch)
	scenarios := []struct {
		name string
		load []int
	}{
		{"idle", make([]int, n)},
		{"loaded", func() []int {
			l := make([]int, n)
			for i := range l {
				l[i] = int(ks[i] % 12) // mean ~5.5, bound 11: a few homes skipped
			}
			return l
		}()},
		{"hot-home", func() []int {
			l := make([]int, n)
			for i := range l {
				l[i] = 4
			}
			home, _ := r.Pick(ks[0], zeroLoad, allEligible)
			l[home] = 40 // the key's home is far over the bound
			return l
		}()},
	}
	for _, sc := range scenarios {
		b.Run(sc.name, func(b *testing.B) {
			load := func(i int) int { return sc.load[i] }
			eligible := func(i int) bool { return i != 5 } // one endpoint down
			keysFor := ks
			if sc.name == "hot-home" {
				keysFor = slices.Repeat(ks[:1], batch)
			}
			var pickT, modT []time.Duration
			sink := 0
			for b.Loop() {
				t0 := time.Now()
				for _, k := range keysFor {
					m, _ := r.Pick(k, load, eligible)
					sink += m
				}
				t1 := time.Now()
				for _, k := range keysFor {
					sink += modulo(k, n, load, eligible)
				}
				t2 := time.Now()
				if len(pickT) < 1<<14 {
					pickT, modT = append(pickT, t1.Sub(t0)), append(modT, t2.Sub(t1))
				}
			}
			_ = sink
			slices.Sort(pickT)
			slices.Sort(modT)
			p, m := pickT[len(pickT)/2], modT[len(modT)/2]
			b.ReportMetric(float64(p.Nanoseconds())/batch, "pick-p50-ns")
			b.ReportMetric(float64(p)/float64(m), "x-modulo")
		})
	}
}

// modulo is the baseline: hash % n, then the next eligible member, reading
// loads the way Pick must (for the mean) so the comparison is fair.
func modulo(hash uint64, n int, load func(int) int, eligible func(int) bool) int {
	total := 0
	for i := range n {
		if eligible(i) {
			total += load(i)
		}
	}
	_ = total
	for k := range n {
		if i := (int(hash%uint64(n)) + k) % n; eligible(i) {
			return i
		}
	}
	return -1
}

func TestPickDoesNotAllocate(t *testing.T) {
	r := mustRing(t, members(32), DefaultOptions())
	load := make([]int, 32)
	ks := keys(64)
	allocs := testing.AllocsPerRun(100, func() {
		for _, k := range ks {
			m, _ := r.Pick(k, func(i int) int { return load[i] }, func(i int) bool { return i != 3 })
			load[m]++
		}
	})
	if allocs != 0 {
		t.Errorf("Pick allocates %.1f times per run", allocs)
	}
}
