package pd

import (
	"encoding/json"
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
// leg) for 1 KB, 64 KB and 1 MB prompts, next to two baselines measured in
// the same run: copying the body into a fresh buffer (the floor for any
// rewriter) and encoding/json.Valid (what a validate-then-splice design
// pays before it starts). ns/byte should stay flat across sizes (linear) and
// allocs/op at 2: the output buffer and the member index.
func BenchmarkRewrite(b *testing.B) {
	kinds := []string{"baseline-copy", "baseline-json.Valid", "vllm-prefill", "sglang", "trt-context"}
	for _, size := range []int{1 << 10, 64 << 10, 1 << 20} {
		body := benchBody(size)
		for k, kind := range kinds {
			b.Run(kind+"/"+strconv.Itoa(size>>10)+"KB", func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				var n int
				for b.Loop() {
					switch k {
					case 0:
						n += len(append([]byte(nil), body...))
						continue
					case 1:
						if json.Valid(body) {
							n++
						}
						continue
					}
					o, err := parseObject(body)
					if err != nil {
						b.Fatal(err)
					}
					switch k {
					case 2:
						n += len(vllmPrefillBody(&o, "/v1/completions"))
					case 3:
						n += len(sglangBody(&o, "10.0.0.1", 8998, 1<<62))
					case 4:
						n += len(trtContextBody(&o, 1<<62))
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(body)), "ns/byte")
				if n == 0 {
					b.Fatal("no output")
				}
			})
		}
	}
}
