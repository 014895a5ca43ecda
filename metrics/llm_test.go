package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestLLMBucketsReachLongGenerations: the LLM families' top finite
// buckets sit above multi-minute generations (the datapath family's 65 s
// put them all in +Inf), and a rule's series go with the rule.
func TestLLMBucketsReachLongGenerations(t *testing.T) {
	tests := []struct {
		name    string
		buckets []float64
		atLeast float64
	}{
		{"request and endpoint duration", llmDurationBuckets, 30 * 60},
		{"time to first token", llmTTFTBuckets, 5 * 60},
		{"token gaps", llmTokenBuckets, 5},
	}
	for _, tt := range tests {
		if top := tt.buckets[len(tt.buckets)-1]; top < tt.atLeast {
			t.Errorf("%s: top bucket %vs, want ≥ %vs", tt.name, top, tt.atLeast)
		}
		for i := 1; i < len(tt.buckets); i++ {
			if tt.buckets[i] <= tt.buckets[i-1] {
				t.Errorf("%s: buckets not increasing at %d: %v", tt.name, i, tt.buckets)
			}
		}
	}

	reg := prometheus.NewRegistry()
	l := NewLLM(reg)
	l.Duration.WithLabelValues("r1", "m").Observe(20 * 60) // a 20-minute generation
	l.Duration.WithLabelValues("r2", "m").Observe(1)
	l.Endpoint.WithLabelValues("r1", "10.0.0.1:8000", EndpointPhaseServe).Observe(1)
	l.Endpoint.WithLabelValues("r1", "10.0.0.2:8000", EndpointPhasePrefill).Observe(1)
	if n := bucketCount(t, reg, "infergate_llm_request_duration_seconds", "r1", 640); n != 0 {
		t.Errorf("a 20-minute request counted ≤ 640 s: %d", n)
	}
	if n := bucketCount(t, reg, "infergate_llm_request_duration_seconds", "r1", 1280); n != 1 {
		t.Errorf("a 20-minute request not counted ≤ 1280 s: %d", n)
	}
	l.DeleteEndpoint("r1", "10.0.0.2:8000")
	if n := seriesCount(t, reg, "infergate_endpoint_request_duration_seconds"); n != 1 {
		t.Errorf("%d endpoint series after deleting one of two", n)
	}
	l.DeleteRule("r1")
	if n := seriesCount(t, reg, "infergate_llm_request_duration_seconds") + seriesCount(t, reg, "infergate_endpoint_request_duration_seconds"); n != 1 {
		t.Errorf("%d series left after deleting r1, want r2's one", n)
	}
}

func seriesCount(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return len(mf.GetMetric())
		}
	}
	return 0
}

// bucketCount is the cumulative count of rule's series at bucket le.
func bucketCount(t *testing.T, reg *prometheus.Registry, name, rule string, le float64) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "rule" && lp.GetValue() == rule {
					for _, b := range m.GetHistogram().GetBucket() {
						if b.GetUpperBound() == le {
							return b.GetCumulativeCount()
						}
					}
				}
			}
		}
	}
	t.Fatalf("%s{rule=%q} has no bucket %v", name, rule, le)
	return 0
}
