package rules

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// Run: go test ./rules -run XXX -bench . -benchmem
// Compare BenchmarkDecodeValidateCompile32 against BenchmarkBaselineUnmarshal32
// (plain encoding/json of the same body) and BenchmarkStoreApplyDurable
// against BenchmarkBaselineAtomicWrite (the bare temp+fsync+rename+dirsync of
// a same-sized file) — ratios, since the box is noisy.

func pd32Body(b *testing.B) []byte {
	r := pdRuleN(32)
	r.ServiceArguments.ProbeType = "http"
	r.ServiceArguments.ProbeReq = "/health"
	r.ServiceArguments.KVBlockSize = 16
	body, err := json.Marshal(r)
	if err != nil {
		b.Fatal(err)
	}
	return body
}

func BenchmarkDecodeValidateCompile32(b *testing.B) {
	body := pd32Body(b)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		r, err := DecodeJSON(body)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Compile(r); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBaselineUnmarshal32(b *testing.B) {
	body := pd32Body(b)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		var r Rule
		if err := json.Unmarshal(body, &r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeRatio32 alternates the pipeline and the plain-Unmarshal
// baseline in one loop so machine noise hits both equally, and reports the
// pipeline's cost as a multiple of the baseline.
func BenchmarkDecodeRatio32(b *testing.B) {
	body := pd32Body(b)
	var pipe, base time.Duration
	for b.Loop() {
		t0 := time.Now()
		var r Rule
		if err := json.Unmarshal(body, &r); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		r, err := DecodeJSON(body)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Compile(r); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		base += t1.Sub(t0)
		pipe += t2.Sub(t1)
	}
	b.ReportMetric(float64(pipe)/float64(base), "x-unmarshal")
}

// storeBenchSet bounds the rule set so every write has the same size.
const storeBenchSet = 64

func BenchmarkStoreApplyDurable(b *testing.B) {
	s, err := OpenStore(StoreOptions{StateDir: b.TempDir(), Log: quietLog()})
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
	s, err := OpenStore(StoreOptions{StateDir: dir, Log: quietLog()})
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

// BenchmarkDecodeMixedCaseRatio32 is the case-insensitive path's cost (issue
// 12): the same 32-endpoint body with every endpoint key and several service
// keys in another letter case (worse than loxicmd's "BGP"/"Monitor"),
// alternated with the exact-case body, reported as a multiple of it.
func BenchmarkDecodeMixedCaseRatio32(b *testing.B) {
	exact := pd32Body(b)
	mixed := exact
	for _, k := range []string{"endpointIP", "targetPort", "weight", "ep_role", "nixl_port", "externalIP", "protocol", "pd_disagg_mode", "kvExactMode"} {
		mixed = bytes.ReplaceAll(mixed, []byte(`"`+k+`"`), []byte(`"`+strings.ToUpper(k)+`"`))
	}
	var mix, base time.Duration
	for b.Loop() {
		t0 := time.Now()
		if _, err := DecodeJSON(exact); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := DecodeJSON(mixed); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		base += t1.Sub(t0)
		mix += t2.Sub(t1)
	}
	b.ReportMetric(float64(mix)/float64(base), "x-exact-case")
}
