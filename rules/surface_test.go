package rules

import (
	"net/http"
	"slices"
	"testing"

	"github.com/infergate/infergate/apierror"
)

func TestAllowedPaths(t *testing.T) {
	tests := []struct {
		in   string
		want []string // nil with ok=false: rejected
		ok   bool
	}{
		{"", nil, true},
		{"/v1/completions", []string{"/v1/completions"}, true},
		{"/v1/completions, /v1/models/*", []string{"/v1/completions", "/v1/models/*"}, true},
		{"v1/completions", nil, false},
		{"/v1/*/x", nil, false},
		{"/v1/../admin", nil, false},
		{"/v1/a?b", nil, false},
		{"/v1/a,,/v1/b", nil, false},
	}
	for _, tc := range tests {
		r := plainRule()
		r.ServiceArguments.AllowedPaths = tc.in
		sr, err := Compile(r)
		if !tc.ok {
			wantAPIError(t, err, http.StatusBadRequest, apierror.CodeInvalidField, "serviceArguments.allowed_paths", "")
			continue
		}
		if err != nil {
			t.Fatalf("allowed_paths %q: %v", tc.in, err)
		}
		if !slices.Equal(sr.AllowedPaths, tc.want) {
			t.Errorf("allowed_paths %q compiled to %q, want %q", tc.in, sr.AllowedPaths, tc.want)
		}
	}
}
