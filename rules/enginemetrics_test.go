package rules

import (
	"net/http"
	"testing"

	"github.com/infergate/infergate/apierror"
)

func TestEngineMetricsPath(t *testing.T) {
	tests := []struct {
		in, engine string
		want       string // compiled; "" with ok: not scraped
		ok         bool
	}{
		{"", "", "/metrics", true},
		{"", "vllm", "/metrics", true},
		{"", "sglang", "/metrics", true},
		{"", "trtllm", "/prometheus/metrics", true},
		{"", "llamacpp", "/metrics", true},
		{"none", "vllm", "", true},
		{"/custom/metrics", "trtllm", "/custom/metrics", true},
		{"metrics", "", "", false},
		{"/metrics?x=1", "", "", false},
		{"/a/../metrics", "", "", false},
		{"/a/./metrics", "", "", false},
		{"/met rics", "", "", false},
		{"/" + string(make([]byte, 300)), "", "", false},
	}
	for _, tc := range tests {
		r := plainRule()
		r.ServiceArguments.EngineMetricsPath = tc.in
		r.ServiceArguments.KVEngineType = tc.engine
		sr, err := Compile(r)
		if !tc.ok {
			wantAPIError(t, err, http.StatusBadRequest, apierror.CodeInvalidField, "serviceArguments.engine_metrics_path", "")
			continue
		}
		if err != nil {
			t.Fatalf("engine_metrics_path %q (%s): %v", tc.in, tc.engine, err)
		}
		if sr.EngineMetricsPath != tc.want {
			t.Errorf("engine_metrics_path %q (%s) compiled to %q, want %q", tc.in, tc.engine, sr.EngineMetricsPath, tc.want)
		}
	}
}
