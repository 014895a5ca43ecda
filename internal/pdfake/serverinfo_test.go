package pdfake

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/infergate/infergate/enginestats"
)

// TestServerInfoReadable: what the fakes serve is read by the gateway's
// own batch-limit reader, as the real engines' answers are, and follows
// SetMaxRunningRequests; without a limit the paths are not served.
func TestServerInfoReadable(t *testing.T) {
	tests := []struct {
		dialect Dialect
		limit   int
		want    enginestats.BatchLimit
	}{
		{SGLang, 48, enginestats.BatchLimit{N: 48, Source: enginestats.SourceSGLang}},
		{VLLM, 256, enginestats.BatchLimit{N: 256, Source: enginestats.SourceVLLM}},
		{VLLM, 0, enginestats.BatchLimit{}},
		{TRTLLM, 64, enginestats.BatchLimit{}},
	}
	for _, tc := range tests {
		t.Run(string(tc.dialect), func(t *testing.T) {
			cfg := DefaultConfig(tc.dialect, Decode)
			cfg.MaxRunningRequests = tc.limit
			e, err := Start(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			base := "http://" + e.Endpoint().Addr.String()
			got, err := enginestats.FetchBatchLimit(ctx, http.DefaultClient, base)
			if got != tc.want || (err == nil) != (tc.want.N > 0) {
				t.Fatalf("= %+v, %v; want %+v", got, err, tc.want)
			}
			if tc.want.N == 0 {
				return
			}
			e.SetMaxRunningRequests(12)
			if got, err := enginestats.FetchBatchLimit(ctx, http.DefaultClient, base); err != nil || got.N != 12 {
				t.Fatalf("after SetMaxRunningRequests(12): %+v, %v", got, err)
			}
		})
	}
}
