package api_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"sort"
	"testing"
	"time"

	"github.com/infergate/infergate/rules"
	"github.com/infergate/infergate/rules/store"
)

// BenchmarkAPICreate measures POST /config/loadbalancer creating a rule,
// including the durable write of the real store in a temp dir. Each created
// rule is deleted outside the timer, so every iteration is a create against
// the same store size. "store-apply" is the same create straight on the
// store (decode included), the baseline the API overhead is read against.
func BenchmarkAPICreate(b *testing.B) {
	body := ruleBody(b, nil)
	newStore := func(b *testing.B) *store.Store {
		s, err := store.Open(store.Options{StateDir: b.TempDir(), Log: quietLog()})
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Replay(context.Background()); err != nil {
			b.Fatal(err)
		}
		return s
	}
	run := func(b *testing.B, create func() error, reset func() error) {
		lat := make([]time.Duration, 0, b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			start := time.Now()
			if err := create(); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
			b.StopTimer()
			if err := reset(); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		b.StopTimer()
		reportPercentiles(b, lat)
	}

	b.Run("store-apply", func(b *testing.B) {
		s := newStore(b)
		run(b, func() error {
			r, err := rules.DecodeJSON(body)
			if err != nil {
				return err
			}
			_, _, err = s.Apply(r)
			return err
		}, func() error { _, err := s.DeleteAll(); return err })
	})
	b.Run("api", func(b *testing.B) {
		s := newStore(b)
		h := serve(b, s, nil).srv.Handler()
		run(b, func() error {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodPost, lb, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				b.Fatalf("create: %d %s", rec.Code, rec.Body)
			}
			return nil
		}, func() error { _, err := s.DeleteAll(); return err })
	})
}

// reportPercentiles adds p50/p99 latency (ns) to the benchmark output.
func reportPercentiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Nanoseconds()) }
	b.ReportMetric(pct(0.50), "p50-ns")
	b.ReportMetric(pct(0.99), "p99-ns")
}
