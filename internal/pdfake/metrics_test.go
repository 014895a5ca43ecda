package pdfake

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/infergate/infergate/enginestats"
)

// scrapeT reads the fake's /metrics as the gateway's scraper would: its
// status, and the sample enginestats parses for the dialect.
func scrapeT(t *testing.T, e *Engine, dialect string) (int, enginestats.Sample) {
	t.Helper()
	resp, err := http.Get("http://" + e.AddrPort().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, enginestats.Sample{}
	}
	s, err := enginestats.Parse(b, enginestats.DialectFor(dialect))
	if err != nil {
		t.Fatalf("%s exposition does not parse: %v\n%s", dialect, err, b)
	}
	return resp.StatusCode, s
}

// TestExportMetrics: with ExportMetrics the fake serves its dialect's load
// families, read by the gateway's own parser; off (the default) and on
// TRT-LLM there is no /metrics.
func TestExportMetrics(t *testing.T) {
	tests := []struct {
		name    string
		dialect Dialect
		export  bool
		status  int
	}{
		{"vllm", VLLM, true, http.StatusOK},
		{"sglang", SGLang, true, http.StatusOK},
		{"off by default", VLLM, false, http.StatusNotFound},
		{"trtllm serves none", TRTLLM, true, http.StatusNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig(tc.dialect, Decode)
			cfg.ExportMetrics = tc.export
			e := startT(t, cfg)
			code, s := scrapeT(t, e, string(tc.dialect))
			if code != tc.status {
				t.Fatalf("GET /metrics: %d, want %d", code, tc.status)
			}
			if code != http.StatusOK {
				return
			}
			for _, f := range []enginestats.Field{enginestats.FieldRunning, enginestats.FieldWaiting, enginestats.FieldKVUsage, enginestats.FieldCompleted} {
				if !s.Has(f) {
					t.Fatalf("field %v missing from the exposition", f)
				}
			}
			if s.Running != 0 || s.Completed != 0 {
				t.Fatalf("idle engine: running %v, completed %v", s.Running, s.Completed)
			}
		})
	}
}

// TestExportMetricsCountsInFlight: a streamed answer in progress is one
// running request; once answered it is one completed.
func TestExportMetricsCountsInFlight(t *testing.T) {
	cfg := DefaultConfig(VLLM, Decode)
	cfg.ExportMetrics = true
	cfg.StreamChunks = 4
	cfg.ChunkDelay = 300 * time.Millisecond
	e := startT(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan int, 1)
	go func() {
		code, _, _ := post(t, ctx, e, "/v1/completions", `{"model":"m","prompt":"hi","stream":true}`)
		done <- code
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, s := scrapeT(t, e, "vllm"); s.Running == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the streaming request never showed as running")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code := <-done; code != http.StatusOK {
		t.Fatalf("streamed request: %d", code)
	}
	// The handler returns just after the client has read the last byte.
	deadline = time.Now().Add(5 * time.Second)
	for {
		_, s := scrapeT(t, e, "vllm")
		if s.Running == 0 && s.Completed == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the answer: running %v, completed %v; want 0 and 1", s.Running, s.Completed)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
