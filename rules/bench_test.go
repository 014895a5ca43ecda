package rules

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// Run: go test ./rules -run XXX -bench . -benchmem
// Compare BenchmarkDecodeValidateCompile32 against BenchmarkBaselineUnmarshal32
// (plain encoding/json of the same body) — ratios, since the box is noisy.
// The store's durable-apply benchmarks are in rules/store.

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
