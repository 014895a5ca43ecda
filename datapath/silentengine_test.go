package datapath

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/spec"
)

// startSilentEngine accepts connections, reads each request whole (head and
// body) and never answers; connections close when the test ends.
func startSilentEngine(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() {
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					<-done // read, never answer
				}
			}()
		}
	}()
	t.Cleanup(func() {
		close(done)
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().String()
}

// TestSilentEngineAnswers504: an engine that takes the request and never
// answers gets the client a 504 upstream_timeout, never a 200 with an empty
// body, whichever way the body reached the engine (streamed through, read
// for routing, none). The client read deadline (BodyReadTimeout) is shorter
// than the first-byte bound here, so a server-side deadline still armed
// while the engine is waited on would cut the request first.
func TestSilentEngineAnswers504(t *testing.T) {
	o := testOptions()
	o.BodyReadTimeout = 100 * time.Millisecond
	o.FirstByteTimeout = 500 * time.Millisecond
	rt, m := newTestRuntime(t, o)
	eng := startSilentEngine(t)
	plain := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, eng, 1))
	plain.Name = "silent-plain"
	chwbl := newRule("127.0.0.1", freePort(t), spec.SelCHWBL, epFor(t, eng, 1))
	chwbl.Name = "silent-chwbl"
	chwbl.CHWBL = &spec.CHWBL{PrefixHashLevel: 1, MeanLoadFactor: 175, Replication: 100}
	for _, r := range []*spec.Rule{plain, chwbl} {
		if err := rt.Install(nil, r); err != nil {
			t.Fatal(err)
		}
	}
	c := testClient()
	body := `{"model":"m","prompt":"hello","max_tokens":4}`
	for _, tc := range []struct {
		name string
		rule *spec.Rule
		req  func(url string) *http.Request
	}{
		{"streamed JSON body", plain, func(u string) *http.Request {
			r, _ := http.NewRequest(http.MethodPost, u+"/v1/completions", strings.NewReader(body))
			r.Header.Set("Content-Type", "application/json")
			return r
		}},
		{"streamed upload", plain, func(u string) *http.Request {
			r, _ := http.NewRequest(http.MethodPost, u+"/v1/audio/transcriptions", strings.NewReader(strings.Repeat("a", 100<<10)))
			r.Header.Set("Content-Type", "audio/wav")
			return r
		}},
		{"body read for routing", chwbl, func(u string) *http.Request {
			r, _ := http.NewRequest(http.MethodPost, u+"/v1/completions", strings.NewReader(body))
			r.Header.Set("Content-Type", "application/json")
			return r
		}},
		{"no body", plain, func(u string) *http.Request {
			r, _ := http.NewRequest(http.MethodGet, u+"/v1/models", nil)
			return r
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range 3 {
				res := do(t, c, tc.req(ruleURL(tc.rule)))
				if res.status != http.StatusGatewayTimeout || errorCode(t, res.body) != CodeUpstreamTimeout {
					t.Fatalf("try %d: %d %q, want 504 %s", i, res.status, res.body, CodeUpstreamTimeout)
				}
			}
		})
	}
	if got := metricValue(t, m.Requests.WithLabelValues(plain.Name, eng, "499", codeClientClosed)); got != 0 {
		t.Errorf("%v requests counted as client-closed", got)
	}
}
