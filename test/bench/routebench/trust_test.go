package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestWaitTrusted: the wait ends when the inventory trusts as many rows as
// wanted (a recording API that turns them trusted on its third answer),
// and fails, naming the count, when it never does.
func TestWaitTrusted(t *testing.T) {
	for _, tc := range []struct {
		name      string
		trustFrom int // the answer (from 1) from which every row is trusted; 0: never
		wantErr   string
		wantAsks  int32
	}{
		{"trusted at once", 1, "", 1},
		{"after the warm-up", 3, "", 3},
		{"never", 0, "0 of 2 endpoints trusted", 0},
	} {
		var asks atomic.Int32
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != kvInventoryPath {
				http.NotFound(w, r)
				return
			}
			n := asks.Add(1)
			trusted := tc.trustFrom > 0 && int(n) >= tc.trustFrom
			_ = json.NewEncoder(w).Encode(map[string]any{"rows": []map[string]any{
				{"endpoint": "a", "trusted": trusted}, {"endpoint": "b", "trusted": trusted, "untrusted_reason": "warmup"}}})
		}))
		err := waitTrusted(context.Background(), ts.Client(), &gateway{api: ts.URL}, 2, time.Second)
		ts.Close()
		if !errorSays(err, tc.wantErr) {
			t.Errorf("%s: %v, want error %q", tc.name, err, tc.wantErr)
		}
		if tc.wantAsks > 0 && asks.Load() != tc.wantAsks {
			t.Errorf("%s: %d inventory reads, want %d", tc.name, asks.Load(), tc.wantAsks)
		}
	}
}
