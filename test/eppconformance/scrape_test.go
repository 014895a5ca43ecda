package eppconformance

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestScrapeGoroutines(t *testing.T) {
	cases := []struct {
		name, body string
		want       int
		wantErr    bool
	}{
		{"present", "# HELP go_goroutines n\n# TYPE go_goroutines gauge\ngo_goroutines 42\ngo_threads 7\n", 42, false},
		{"absent", "go_threads 7\n", 0, true},
		{"garbage", "go_goroutines many\n", 0, true},
	}
	for _, tc := range cases {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, tc.body) }))
		got, err := scrapeGoroutines(srv.URL)
		srv.Close()
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("%s: %d, %v; want %d, error %v", tc.name, got, err, tc.want, tc.wantErr)
		}
	}
}
