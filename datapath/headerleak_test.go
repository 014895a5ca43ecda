package datapath

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/spec"
)

// TestNoHeaderLeaksBetweenResponses: the lean front end hands a finished
// response's header map, emptied, to the next response on the connection.
// Through the whole gateway (engine headers relayed, the gateway's own
// error answers, request ids), no field of one response may appear in a
// later one on the same client connection, one request at a time or
// pipelined: behind a load balancer that shares connections, the next
// response is another client's.
func TestNoHeaderLeaksBetweenResponses(t *testing.T) {
	eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(r.URL.RawQuery, "secret") {
			w.Header().Set("X-Secret", "client-a")
			w.Header().Set("Set-Cookie", "session=client-a")
		}
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(eng.Close)
	rt, _ := newTestRuntime(t, testOptions())
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, eng.Listener.Addr().String(), 1))
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	addr := r.Key.ListenAddr().String()
	const body = `{"model":"m","prompt":"x"}`
	post := func(q string) string {
		return "POST /v1/completions" + q + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
			strconv.Itoa(len(body)) + "\r\n\r\n" + body
	}
	reqs := []struct {
		raw    string
		secret bool // the engine's answer carries the secret fields
	}{
		{post("?secret"), true},
		{post(""), false},
		{"GET /no/such/api HTTP/1.1\r\nHost: x\r\n\r\n", false},
		{post("?secret"), true},
		{"GET /no/such/api HTTP/1.1\r\nHost: x\r\n\r\n", false},
		{post(""), false},
	}
	for _, pipelined := range []bool{false, true} {
		t.Run(map[bool]string{false: "one at a time", true: "pipelined"}[pipelined], func(t *testing.T) {
			nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(nc)
			if pipelined {
				var all strings.Builder
				for _, rq := range reqs {
					all.WriteString(rq.raw)
				}
				if _, err := io.WriteString(nc, all.String()); err != nil {
					t.Fatal(err)
				}
			}
			ids := map[string]bool{}
			for i, rq := range reqs {
				if !pipelined {
					if _, err := io.WriteString(nc, rq.raw); err != nil {
						t.Fatal(err)
					}
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("response %d: %v", i, err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				for _, k := range []string{"X-Secret", "Set-Cookie"} {
					if got := resp.Header.Get(k) != ""; got != rq.secret {
						t.Errorf("response %d (status %d): %s present %v, want %v: %v", i, resp.StatusCode, k, got, rq.secret, resp.Header)
					}
				}
				for k, v := range resp.Header {
					if len(v) != 1 && k != "Set-Cookie" {
						t.Errorf("response %d: %s has %d values %q (one added per response?)", i, k, len(v), v)
					}
				}
				if id := resp.Header.Get(HeaderRequestID); id != "" {
					if ids[id] {
						t.Errorf("response %d: request id %s of an earlier response", i, id)
					}
					ids[id] = true
				}
			}
		})
	}
}
