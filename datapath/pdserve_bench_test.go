package datapath

import (
	"bytes"
	"io"
	"net/http"
	rtmetrics "runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/pdfake"
	"github.com/infergate/infergate/spec"
	"github.com/infergate/infergate/test/bench/proccpu"
)

// BenchmarkPDAddedLatency measures what the datapath adds to a vLLM P/D
// request (non-streaming, 1P1D, cache-aware so the prompt key and the
// prefix index are on the path) for prompts of 1 KB to 1 MB: each iteration
// sends one request through the gateway and, as the baseline, the same two
// legs straight to the engines (the bodies the gateway sent, taken from the
// fakes' records), the two ways taking turns to go first. Reported per
// size: p50 of both, the added latency at p50 and p99 in µs, the ratio of
// the medians, the process CPU per request of both ways (client and fake
// engines included, so their difference is the gateway's) and the GC
// cycles per iteration, all from the same run. The p99 of 300 iterations
// is their third-slowest: run thousands for a p99 worth comparing.
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
	r := newRule("127.0.0.1", freePort(b), spec.SelRoundRobin, pre.Endpoint(), dec.Endpoint())
	r.Engine, r.PD = spec.EngineVLLM, &spec.PD{SessionTTL: time.Minute, CacheAware: true}
	if err := rt.Install(nil, r); err != nil {
		b.Fatal(err)
	}
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	defer c.CloseIdleConnections()
	send := func(b *testing.B, url string, body []byte, h http.Header) {
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
	gw := ruleURL(r) + pathCompletions
	preURL := "http://" + pre.AddrPort().String() + pathCompletions
	decURL := "http://" + dec.AddrPort().String() + pathCompletions
	legHeader := func(h http.Header) http.Header {
		return http.Header{HeaderRequestID: h[HeaderRequestID]}
	}
	for _, size := range []struct {
		name  string
		bytes int
	}{{"prompt=1KB", 1 << 10}, {"prompt=32KB", 32 << 10}, {"prompt=256KB", 256 << 10}, {"prompt=400KB", 400 << 10}, {"prompt=1MB", 1 << 20}} {
		b.Run(size.name, func(b *testing.B) {
			client := completionWithPrompt(size.bytes)
			pre.ForgetRecords()
			dec.ForgetRecords()
			send(b, gw, client, nil) // warm up, and learn the legs the gateway sends
			pr, dr := pre.Records()[0], dec.Records()[0]
			direct := func() {
				send(b, preURL, pr.Body, legHeader(pr.Header))
				send(b, decURL, dr.Body, legHeader(dr.Header))
			}
			direct()

			via := make([]time.Duration, 0, b.N)
			base := make([]time.Duration, 0, b.N)
			var viaCPU, baseCPU time.Duration
			gc0 := gcCycles()
			b.SetBytes(int64(len(client)))
			b.ResetTimer()
			for i := range b.N {
				// The two ways alternate which goes first, so neither
				// always runs right after the other's garbage.
				first, second := func() { send(b, gw, client, nil) }, direct
				if i%2 == 1 {
					first, second = direct, first
				}
				c0, t0 := proccpu.Self(), time.Now()
				first()
				c1, t1 := proccpu.Self(), time.Now()
				second()
				c2, t2 := proccpu.Self(), time.Now()
				g, d, gc, dc := t1.Sub(t0), t2.Sub(t1), c1-c0, c2-c1
				if i%2 == 1 {
					g, d, gc, dc = d, g, dc, gc
				}
				viaCPU += gc
				baseCPU += dc
				via = append(via, g)
				base = append(base, d)
				// The fakes keep every request's body: four prompt-sized
				// records per iteration would grow the heap (and the GC
				// work and page faults every sample pays) to hundreds of MB.
				pre.ForgetRecords()
				dec.ForgetRecords()
			}
			b.StopTimer()
			gcs := gcCycles() - gc0
			slices.Sort(via)
			slices.Sort(base)
			at := func(d []time.Duration, q float64) time.Duration { return d[min(int(q*float64(len(d))), len(d)-1)] }
			gv, gb := at(via, 0.5), at(base, 0.5)
			b.ReportMetric(float64(gv.Microseconds()), "gateway-p50-µs")
			b.ReportMetric(float64(gb.Microseconds()), "direct-p50-µs")
			b.ReportMetric(float64((gv - gb).Microseconds()), "added-p50-µs")
			b.ReportMetric(float64((at(via, 0.99) - at(base, 0.99)).Microseconds()), "added-p99-µs")
			b.ReportMetric(float64(gv)/float64(gb), "ratio")
			b.ReportMetric(float64(viaCPU.Microseconds())/float64(b.N), "gateway-cpu-µs/op")
			b.ReportMetric(float64(baseCPU.Microseconds())/float64(b.N), "direct-cpu-µs/op")
			b.ReportMetric(float64(gcs)/float64(b.N), "gc/op")
		})
	}
}

// gcCycles is how many GC cycles the process has completed (the
// runtime/metrics counter: no stop-the-world, unlike ReadMemStats).
func gcCycles() uint64 {
	s := []rtmetrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	rtmetrics.Read(s)
	return s[0].Value.Uint64()
}

// completionWithPrompt is a completion request whose prompt makes the body
// about n bytes: distinct words, so the prompt key and the prefix index see
// text rather than one repeated byte.
func completionWithPrompt(n int) []byte {
	var p strings.Builder
	p.Grow(n)
	for i := 0; p.Len() < n-64; i++ {
		p.WriteString("word")
		p.WriteString(strconv.Itoa(i))
		p.WriteByte(' ')
	}
	return []byte(`{"model":"fake-model","prompt":"` + p.String() + `","max_tokens":3}`)
}
