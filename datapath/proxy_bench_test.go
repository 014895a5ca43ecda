package datapath

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/fakeengine"
	"github.com/infergate/infergate/spec"
)

// BenchmarkProxy compares a completion sent straight to a fake engine
// ("direct", the baseline) with the same request through the datapath
// ("proxied"), in parallel on keep-alive connections. Report the ratio of
// the two ns/op, measured in the same run.
func BenchmarkProxy(b *testing.B) {
	for _, tc := range benchTargets(b, fakeengine.Options{Name: "bench", NoLog: true}) {
		b.Run(tc.name, func(b *testing.B) {
			postParallel(b, tc.url)
		})
	}
}

// benchTarget is one of benchTargets' completion URLs.
type benchTarget struct{ name, url string }

// benchTargets starts a fake engine with o and a round-robin rule in front
// of it, both stopped when b ends, and returns the engine's completion URL
// ("direct", the baseline) and the rule's ("proxied").
func benchTargets(b *testing.B, o fakeengine.Options) []benchTarget {
	b.Helper()
	e, err := fakeengine.Start(o)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(e.Close)
	rt := New(DefaultOptions(), nil, nil)
	b.Cleanup(func() { _ = rt.Close(context.Background()) })
	r := newRule("127.0.0.1", freePort(b), spec.SelRoundRobin, spec.Endpoint{ID: e.Addr(), Addr: mustAddrPort(e.Addr()), Weight: 1})
	if err := rt.Install(nil, r); err != nil {
		b.Fatal(err)
	}
	return []benchTarget{
		{"direct", "http://" + e.Addr() + "/v1/completions"},
		{"proxied", ruleURL(r) + "/v1/completions"},
	}
}

// postParallel posts completionBody to url from 8 goroutines per CPU on
// keep-alive connections, b.N times in all, and fails on any non-200.
func postParallel(b *testing.B, url string) {
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	defer c.CloseIdleConnections()
	b.ReportAllocs()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := c.Post(url, "application/json", strings.NewReader(completionBody))
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
}

// BenchmarkSurface measures the latency one request adds on the
// pass-through path (the body streams to the engine unread: a rule nothing
// routes on) against the routed path (the body is read whole and its model
// parsed: a model-pinned rule), one request at a time, in the same run,
// with "direct" (no gateway) as the baseline. Added latency = ns/op − direct.
func BenchmarkSurface(b *testing.B) {
	e, err := fakeengine.Start(fakeengine.Options{Name: "bench", NoLog: true})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	rt := New(DefaultOptions(), nil, nil)
	defer func() { _ = rt.Close(b.Context()) }()
	ep := spec.Endpoint{ID: e.Addr(), Addr: mustAddrPort(e.Addr()), Weight: 1}
	routed := newRule("127.0.0.1", freePort(b), spec.SelRoundRobin, ep)
	routed.Key.ModelName = "fake-model"
	pass := newRule("127.0.0.1", freePort(b), spec.SelRoundRobin, ep)
	for _, r := range []*spec.Rule{routed, pass} {
		if err := rt.Install(nil, r); err != nil {
			b.Fatal(err)
		}
	}
	body := `{"model":"fake-model","prompt":"` + strings.Repeat("lorem ipsum ", 200) + `","max_tokens":4}`
	// The three targets take turns within each iteration, so drift on a
	// shared box hits them alike; each reports its median.
	urls := []string{"http://" + e.Addr() + "/v1/completions", ruleURL(routed) + "/v1/completions", ruleURL(pass) + "/v1/completions"}
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	defer c.CloseIdleConnections()
	var durs [3][]time.Duration
	b.ReportAllocs()
	for b.Loop() {
		for k, u := range urls {
			t0 := time.Now()
			resp, err := c.Post(u, "application/json", strings.NewReader(body))
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			durs[k] = append(durs[k], time.Since(t0))
			if resp.StatusCode != 200 {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
	}
	med := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Nanoseconds())
	}
	direct, rout, pt := med(durs[0]), med(durs[1]), med(durs[2])
	b.ReportMetric(direct, "direct-p50-ns")
	b.ReportMetric(rout-direct, "routed-added-ns")
	b.ReportMetric(pt-direct, "passthrough-added-ns")
	if rout > direct {
		b.ReportMetric((pt-direct)/(rout-direct), "passthrough/routed-added")
	}
}
