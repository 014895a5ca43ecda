package datapath

import (
	"bufio"
	"bytes"
	"flag"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/fakeengine"
)

// sseBenchTokens is the events per streamed completion in BenchmarkProxySSE.
const sseBenchTokens = 32

// sseBenchDelay is the fake engine's delay between events: raise it under
// callgrind (which slows the process tens of times), or events written
// apart are read together and the per-event cost is not measured.
var sseBenchDelay = flag.Duration("sse-bench-token-delay", 200*time.Microsecond, "BenchmarkProxySSE: delay between a stream's events")

// BenchmarkProxySSE streams completions of sseBenchTokens events, each
// event written on its own (a token delay apart), straight from the fake
// engine ("direct") and through the datapath ("proxied"), in parallel on
// keep-alive connections. One op is one stream: divide the proxied −
// direct difference (allocations, or instructions under callgrind) by
// sseBenchTokens+1 (the [DONE] line) for the cost per relayed event.
func BenchmarkProxySSE(b *testing.B) {
	body := `{"model":"fake-model","prompt":"hello","max_tokens":` + strconv.Itoa(sseBenchTokens) + `,"stream":true}`
	for _, tc := range benchTargets(b, fakeengine.Options{Name: "bench", NoLog: true, Tokens: sseBenchTokens, TokenDelay: *sseBenchDelay}) {
		b.Run(tc.name, func(b *testing.B) {
			c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
			defer c.CloseIdleConnections()
			b.ReportAllocs()
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := c.Post(tc.url, "application/json", strings.NewReader(body))
					if err != nil {
						b.Error(err)
						return
					}
					events := 0
					sc := bufio.NewScanner(resp.Body)
					for sc.Scan() {
						if bytes.HasPrefix(sc.Bytes(), []byte("data: ")) {
							events++
						}
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 || events < sseBenchTokens {
						b.Errorf("status %d, %d events", resp.StatusCode, events)
						return
					}
				}
			})
		})
	}
}
