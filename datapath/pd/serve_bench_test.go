package pd_test

import (
	"context"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/infergate/infergate/datapath/pd"
	"github.com/infergate/infergate/datapath/upstream"
	"github.com/infergate/infergate/internal/pdfake"
	"github.com/infergate/infergate/spec"
)

// discardWriter is a minimal http.ResponseWriter with Flush, so the
// benchmark measures Serve, not a client.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(int)             {}
func (w *discardWriter) Flush()                      {}

// BenchmarkVLLMAddedLatency interleaves, per iteration, one vLLM P/D request
// sent leg by leg directly to the fake engines (prefill, then decode, with
// pre-built bodies) and one through Serve, against the same engines and
// Sender, and reports both p50s and the p50 of the per-pair difference: the
// gateway's added latency, measured in the same run on the same box.
func BenchmarkVLLMAddedLatency(b *testing.B) {
	for _, stream := range []bool{false, true} {
		name := map[bool]string{false: "json", true: "sse"}[stream]
		b.Run(name, func(b *testing.B) {
			start := func(addr string, role pdfake.Role) *pdfake.Engine {
				cfg := pdfake.DefaultConfig(pdfake.VLLM, role)
				cfg.Addr = addr
				e, err := pdfake.Start(cfg)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = e.Close() })
				return e
			}
			p, d := start("127.0.0.2:0", pdfake.Prefill), start("127.0.0.4:0", pdfake.Decode)
			sender := upstream.New(time.Second, 64, nil)
			defer sender.CloseIdle()
			opts := pd.DefaultOptions()
			opts.Log.(interface{ SetOutput(io.Writer) }).SetOutput(io.Discard)
			dialect, _ := pd.New(spec.EngineVLLM, opts)
			path := "/v1/completions"
			body := []byte(clientBody(path, stream))
			pair := pd.Pair{Prefill: p.Endpoint(), Decode: d.Endpoint()}
			rule := &spec.Rule{Name: "bench", Engine: spec.EngineVLLM}
			hdr := http.Header{"Content-Type": {"application/json"}}
			prefillBody := []byte(`{"model":"m","prompt":"Say caf\u00e9","temperature":0.70,"max_tokens":1,"stream":false,"seed":1E2,"n":1,"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false}}`)
			ctx := context.Background()

			direct := func() {
				resp, err := sender.Send(ctx, upstream.Leg{Endpoint: pair.Prefill, Path: path, Header: hdr, Body: prefillBody})
				if err != nil {
					b.Fatal(err)
				}
				pb, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				// The decode body needs the params: splice like a minimal client would.
				i := len(body) - 1
				db := append(append(append([]byte{}, body[:i]...), `,"kv_transfer_params":`...), extractKV(pb)...)
				db = append(db, '}')
				resp, err = sender.Send(ctx, upstream.Leg{Endpoint: pair.Decode, Path: path, Header: hdr, Body: db})
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			viaServe := func() {
				w := &discardWriter{h: http.Header{}}
				o := dialect.Serve(ctx, w, &pd.Request{Path: path, Header: hdr, Body: body, Rule: rule}, pair, sender)
				if o.Status != 200 || o.KVTransferFailed {
					b.Fatalf("serve outcome %+v", o)
				}
			}
			direct()
			viaServe()
			var dd, sd, diff []float64
			for b.Loop() {
				t0 := time.Now()
				direct()
				t1 := time.Now()
				viaServe()
				t2 := time.Now()
				dd = append(dd, float64(t1.Sub(t0).Microseconds()))
				sd = append(sd, float64(t2.Sub(t1).Microseconds()))
				diff = append(diff, float64(t2.Sub(t1).Microseconds()-t1.Sub(t0).Microseconds()))
			}
			b.ReportMetric(p50(dd), "direct-p50-µs")
			b.ReportMetric(p50(sd), "serve-p50-µs")
			b.ReportMetric(p50(diff), "added-p50-µs")
			b.ReportMetric(p50(sd)/p50(dd), "serve/direct")
		})
	}
}

func p50(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// extractKV pulls the kv_transfer_params object out of a prefill response.
func extractKV(b []byte) []byte {
	const key = `"kv_transfer_params":`
	i := indexOf(b, key)
	if i < 0 {
		return []byte("null")
	}
	j, depth := i+len(key), 0
	for k := j; k < len(b); k++ {
		switch b[k] {
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return b[j : k+1]
			}
		}
	}
	return []byte("null")
}

func indexOf(b []byte, s string) int {
	for i := 0; i+len(s) <= len(b); i++ {
		if string(b[i:i+len(s)]) == s {
			return i
		}
	}
	return -1
}
