package datapath

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/spec"
)

// startStallingEngine answers every request's headers at once, then holds
// its body until release is called (or the test ends).
func startStallingEngine(t *testing.T) (addr string, release func()) {
	t.Helper()
	done := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(done) }) }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-done:
		case <-r.Context().Done():
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(func() { release(); srv.Close() })
	return srv.Listener.Addr().String(), release
}

// TestSaturatedEngineAnswers504AtFirstByteTimeout: with the engine's one
// allowed connection held by a long response, a second request
// waits for a connection no longer than the first-byte timeout and gets
// 504 upstream_pool_timeout (not sent, so the breaker is not fed), instead
// of waiting for the first to time out and then timing out itself.
func TestSaturatedEngineAnswers504AtFirstByteTimeout(t *testing.T) {
	const firstByte = 400 * time.Millisecond
	o := testOptions()
	o.FirstByteTimeout = firstByte
	o.Upstream.MaxConnsPerEndpoint = 1
	o.BodyStallTimeout = 10 * time.Second
	rt, m := newTestRuntime(t, o)
	eng, release := startStallingEngine(t)
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, eng, 1))
	r.Name = "saturated"
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	c := testClient()
	body := `{"model":"m","prompt":"hello","max_tokens":4}`
	first := make(chan result, 1)
	go func() { first <- post(t, c, ruleURL(r)+"/v1/completions", body) }()
	waitFor(t, 5*time.Second, "the first request to hold the engine's connection", func() bool {
		return rt.up.OpenConns(eng) == 1
	})
	start := time.Now()
	res := post(t, c, ruleURL(r)+"/v1/completions", body)
	took := time.Since(start)
	if res.status != http.StatusGatewayTimeout || errorCode(t, res.body) != CodeUpstreamPoolTimeout {
		t.Fatalf("waiting request: %d %q, want 504 %s", res.status, res.body, CodeUpstreamPoolTimeout)
	}
	// Without the bound it waits for the first request's 10 s body stall;
	// half of that leaves a loaded machine its slack (734 ms was seen at
	// load 20 against the 400 ms bound).
	if took > o.BodyStallTimeout/2 {
		t.Fatalf("the waiting request was answered after %v, want within its first-byte timeout %v", took, firstByte)
	}
	release()
	if f := <-first; f.status != http.StatusOK {
		t.Fatalf("first request: %d %q, want 200", f.status, f.body)
	}
	if got := metricValue(t, m.Requests.WithLabelValues(r.Name, eng, "504", CodeUpstreamPoolTimeout)); got != 1 {
		t.Fatalf("counted %v requests as %s, want 1", got, CodeUpstreamPoolTimeout)
	}
	if !strings.Contains(res.header.Get(HeaderError), CodeUpstreamPoolTimeout) {
		t.Fatalf("%s header %q", HeaderError, res.header.Get(HeaderError))
	}
}
