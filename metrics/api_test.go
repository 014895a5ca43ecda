package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// TestAPIExposition is the golden test of the API family: names, types, help
// and label sets are what dashboards and alerts key on.
func TestAPIExposition(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := NewAPI(reg)
	a.Requests.WithLabelValues("POST", "/netlox/v1/config/loadbalancer", "200").Inc()
	a.Latency.WithLabelValues("POST", "/netlox/v1/config/loadbalancer").Observe(0.002)
	a.Panics.Inc()
	a.AuthDenied.WithLabelValues("read_only").Inc()
	a.TokenReloads.WithLabelValues("sighup", "ok").Inc()

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	enc := expfmt.NewEncoder(&sb, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if mf.GetName() == "infergate_api_request_duration_seconds" {
			// Bucket lines are long and not the contract; check the head.
			if got := mf.GetMetric()[0].GetHistogram().GetSampleCount(); got != 1 {
				t.Errorf("latency sample count = %d, want 1", got)
			}
			if n := len(mf.GetMetric()[0].GetHistogram().GetBucket()); n != 16 {
				t.Errorf("latency buckets = %d, want 16", n)
			}
			mf.Metric[0].Histogram.Bucket = nil
		}
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	want := `# HELP infergate_api_auth_denied_total Management API requests refused by access control, by reason (host_not_allowed, missing_token, invalid_token, read_only).
# TYPE infergate_api_auth_denied_total counter
infergate_api_auth_denied_total{reason="read_only"} 1
# HELP infergate_api_panics_total Management API handler panics recovered and answered with 500; any increase is a bug.
# TYPE infergate_api_panics_total counter
infergate_api_panics_total 1
# HELP infergate_api_request_duration_seconds Management API request latency by method and route template.
# TYPE infergate_api_request_duration_seconds histogram
infergate_api_request_duration_seconds_bucket{method="POST",route="/netlox/v1/config/loadbalancer",le="+Inf"} 1
infergate_api_request_duration_seconds_sum{method="POST",route="/netlox/v1/config/loadbalancer"} 0.002
infergate_api_request_duration_seconds_count{method="POST",route="/netlox/v1/config/loadbalancer"} 1
# HELP infergate_api_requests_total Management API requests by method, route template and HTTP status code.
# TYPE infergate_api_requests_total counter
infergate_api_requests_total{code="200",method="POST",route="/netlox/v1/config/loadbalancer"} 1
# HELP infergate_api_token_reloads_total Token file reloads by trigger (sighup, file_change) and result (ok, unchanged, error; on error the previous tokens stay in force).
# TYPE infergate_api_token_reloads_total counter
infergate_api_token_reloads_total{result="ok",trigger="sighup"} 1
`
	if got := sb.String(); got != want {
		t.Errorf("exposition mismatch\n--- got\n%s\n--- want\n%s", got, want)
	}
}
