package datapath

import (
	"bytes"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/infergate/infergate/datapath/spec"
	"github.com/infergate/infergate/test/pdfake"
)

// BenchmarkPDAddedLatency measures what the datapath adds to a vLLM P/D
// request (non-streaming, 1P1D): each iteration sends one request through
// the gateway and, as the baseline, the same two legs straight to the
// engines (the bodies the gateway sent, taken from the fakes' records).
// Reported: p50 of both and the p50 added latency in µs, plus the ratio of
// the medians, all from the same run.
func BenchmarkPDAddedLatency(b *testing.B) {
	start := func(role pdfake.Role, addr string) *pdfake.Engine {
		cfg := pdfake.DefaultConfig(pdfake.VLLM, role)
		cfg.Addr, cfg.StreamChunks = addr, 1
		e, err := pdfake.Start(cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = e.Close() })
		return e
	}
	pre := start(pdfake.Prefill, "127.0.0.20:0")
	dec := start(pdfake.Decode, "127.0.0.30:0")
	o := DefaultOptions()
	rt := New(o, nil, nil)
	b.Cleanup(func() { _ = rt.Close(b.Context()) })
	r := newRule("127.0.0.1", freePortB(b), spec.SelRoundRobin, pre.Endpoint(), dec.Endpoint())
	r.Engine, r.PD = spec.EngineVLLM, &spec.PD{SessionTTL: time.Minute}
	if err := rt.Install(nil, r); err != nil {
		b.Fatal(err)
	}
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	defer c.CloseIdleConnections()
	send := func(url string, body []byte, h http.Header) {
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		for k, v := range h {
			req.Header[k] = v
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("%s: status %d", url, resp.StatusCode)
		}
	}
	client := []byte(`{"model":"fake-model","prompt":"hello there","max_tokens":3}`)
	gw := ruleURL(r) + pathCompletions
	send(gw, client, nil) // warm up, and learn the legs the gateway sends
	pr, dr := pre.Records()[0], dec.Records()[0]
	legHeader := func(h http.Header) http.Header {
		return http.Header{HeaderRequestID: h[HeaderRequestID]}
	}
	preURL := "http://" + pre.AddrPort().String() + pathCompletions
	decURL := "http://" + dec.AddrPort().String() + pathCompletions
	direct := func() {
		send(preURL, pr.Body, legHeader(pr.Header))
		send(decURL, dr.Body, legHeader(dr.Header))
	}
	direct()

	via := make([]time.Duration, 0, b.N)
	base := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		send(gw, client, nil)
		t1 := time.Now()
		direct()
		t2 := time.Now()
		via = append(via, t1.Sub(t0))
		base = append(base, t2.Sub(t1))
	}
	b.StopTimer()
	p50 := func(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)/2] }
	gv, gb := p50(via), p50(base)
	b.ReportMetric(float64(gv.Microseconds()), "gateway-p50-µs")
	b.ReportMetric(float64(gb.Microseconds()), "direct-p50-µs")
	b.ReportMetric(float64((gv - gb).Microseconds()), "added-p50-µs")
	b.ReportMetric(float64(gv)/float64(gb), "ratio")
	// Every record ever taken is kept by the fakes; bound the run.
	if n := len(pre.Records()); n > 1_000_000 {
		b.Fatalf("%d records", n)
	}
}
