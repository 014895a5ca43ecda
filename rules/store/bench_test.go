package store

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// Run: go test ./rules/store -run XXX -bench . -benchmem
// Compare BenchmarkStoreApplyDurable against BenchmarkBaselineAtomicWrite
// (the bare temp+fsync+rename+dirsync of a same-sized file) — ratios, since
// the box is noisy.

// storeBenchSet bounds the rule set so every write has the same size.
const storeBenchSet = 64

func BenchmarkStoreApplyDurable(b *testing.B) {
	s, err := Open(Options{StateDir: b.TempDir(), Log: quietLog()})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Replay(context.Background()); err != nil {
		b.Fatal(err)
	}
	base := pdRuleN(8)
	durs := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%storeBenchSet == 0 && i > 0 {
			b.StopTimer()
			if _, err := s.DeleteAll(); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		r := withPort(base, 10000+i%storeBenchSet)
		start := time.Now()
		if _, _, err := s.Apply(r); err != nil {
			b.Fatal(err)
		}
		durs = append(durs, time.Since(start))
	}
	b.StopTimer()
	reportPercentiles(b, durs)
}

// BenchmarkStoreApplyDurableRatio alternates a durable Apply with a bare
// atomic write of the current state file, so disk and CPU noise hit both,
// and reports Apply's cost as a multiple of the bare write.
func BenchmarkStoreApplyDurableRatio(b *testing.B) {
	dir := b.TempDir()
	s, err := Open(Options{StateDir: dir, Log: quietLog()})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Replay(context.Background()); err != nil {
		b.Fatal(err)
	}
	base := pdRuleN(8)
	side := filepath.Join(b.TempDir(), stateFileName)
	var apply, write time.Duration
	for i := 0; i < b.N; i++ {
		if i%storeBenchSet == 0 && i > 0 {
			if _, err := s.DeleteAll(); err != nil {
				b.Fatal(err)
			}
		}
		doc, err := encodeState(s.List())
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if err := writeFileAtomic(side, doc); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, _, err := s.Apply(withPort(base, 10000+i%storeBenchSet)); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		write += t1.Sub(t0)
		apply += t2.Sub(t1)
	}
	b.ReportMetric(float64(apply)/float64(write), "x-atomic-write")
}

func BenchmarkBaselineAtomicWrite(b *testing.B) {
	entries := make([]Entry, storeBenchSet/2) // mean set size of the store benchmark
	for i := range entries {
		entries[i].Rule = withPort(pdRuleN(8), 10000+i)
	}
	doc, err := encodeState(entries)
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(b.TempDir(), stateFileName)
	durs := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if err := writeFileAtomic(path, doc); err != nil {
			b.Fatal(err)
		}
		durs = append(durs, time.Since(start))
	}
	b.StopTimer()
	reportPercentiles(b, durs)
}

func reportPercentiles(b *testing.B, durs []time.Duration) {
	if len(durs) == 0 {
		return
	}
	slices.Sort(durs)
	at := func(q float64) float64 { return float64(durs[int(q*float64(len(durs)-1))].Microseconds()) }
	b.ReportMetric(at(0.50), "p50-µs")
	b.ReportMetric(at(0.99), "p99-µs")
}
