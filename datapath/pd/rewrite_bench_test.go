package pd

import (
	"strconv"
	"strings"
	"testing"
)

// benchBody is a realistic client body with a prompt of about size bytes.
func benchBody(size int) []byte {
	const unit = "The quick brown fox jumps over the lazy dog. \\u00e9 " // 54 bytes, escape intact
	prompt := strings.Repeat(unit, size/len(unit)+1)
	return []byte(`{"model":"Qwen/Qwen3-0.6B","prompt":"` + prompt + `","max_tokens":128,"temperature":0.7,"stream":true,"stream_options":{"include_usage":true},"user":"alice"}`)
}

// BenchmarkRewrite measures one parse plus one rewrite (what Serve does per
// leg) for 1 KB, 64 KB and 1 MB prompts. ns/byte should stay flat across
// sizes (linear) and allocs/op at 2: the output buffer and the member index.
func BenchmarkRewrite(b *testing.B) {
	for _, size := range []int{1 << 10, 64 << 10, 1 << 20} {
		body := benchBody(size)
		for _, r := range []struct {
			name string
			f    func(o *object) []byte
		}{
			{"vllm-prefill", func(o *object) []byte { return vllmPrefillBody(o, "/v1/completions") }},
			{"sglang", func(o *object) []byte { return sglangBody(o, "10.0.0.1", 8998, 1<<62) }},
			{"trt-context", func(o *object) []byte { return trtContextBody(o, 1<<62) }},
		} {
			b.Run(r.name+"/"+strconv.Itoa(size>>10)+"KB", func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				var n int
				for b.Loop() {
					o, err := parseObject(body)
					if err != nil {
						b.Fatal(err)
					}
					n += len(r.f(&o))
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(body)), "ns/byte")
				if n == 0 {
					b.Fatal("no output")
				}
			})
		}
	}
}
