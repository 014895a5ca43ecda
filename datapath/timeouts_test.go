package datapath

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/spec"
)

func TestCapBy(t *testing.T) {
	tests := []struct{ d, limit, want time.Duration }{
		{60 * time.Second, 240 * time.Second, 60 * time.Second}, // inactiveTimeOut's default never stretches a bound
		{60 * time.Second, 10 * time.Second, 10 * time.Second},  // a shorter inactiveTimeOut caps it
		{60 * time.Second, 0, 60 * time.Second},
		{0, 5 * time.Second, 5 * time.Second},
	}
	for _, tc := range tests {
		if got := capBy(tc.d, tc.limit); got != tc.want {
			t.Errorf("capBy(%v, %v) = %v, want %v", tc.d, tc.limit, got, tc.want)
		}
	}
}

// TestHungEngineBoundedByFirstByteTimeout: a rule with a long
// inactiveTimeOut (the compiled default is 240 s) does not stretch the wait
// for a hung engine's first byte: FirstByteTimeout answers 504.
func TestHungEngineBoundedByFirstByteTimeout(t *testing.T) {
	o := testOptions()
	o.FirstByteTimeout = 100 * time.Millisecond
	rt, _ := newTestRuntime(t, o)
	e := startEngine(t, "e")
	e.SetHang(true)
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	r.IdleTimeout = time.Hour // longer than the test client's own 10 s limit
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	res := post(t, testClient(), ruleURL(r)+"/v1/completions", completionBody)
	if res.status != http.StatusGatewayTimeout || errorCode(t, res.body) != CodeUpstreamTimeout {
		t.Fatalf("got %d %s, want 504 %s", res.status, res.body, CodeUpstreamTimeout)
	}
}

// TestStalledBodyBoundedByBodyStallTimeout: an engine that sends its
// headers and part of a plain body, then goes silent, is cut after
// BodyStallTimeout even when the rule's inactiveTimeOut is an hour.
func TestStalledBodyBoundedByBodyStallTimeout(t *testing.T) {
	o := testOptions()
	o.BodyStallTimeout = 100 * time.Millisecond
	rt, _ := newTestRuntime(t, o) // first: its goroutine check runs after the engine closes
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "1000")
		_, _ = io.WriteString(w, `{"id":"cmpl-1",`)
		w.(http.Flusher).Flush()
		<-r.Context().Done() // silent until the gateway gives up
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, ln.Addr().String(), 1))
	r.IdleTimeout = time.Hour
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	// The cut may come before the buffered headers reach the client (the
	// Post fails) or after (the body read fails); either way it must be
	// the gateway's cut, not the test client's own 10 s limit.
	resp, err := testClient().Post(ruleURL(r)+"/v1/completions", "application/json", strings.NewReader(completionBody))
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if err == nil || strings.Contains(err.Error(), "Client.Timeout") {
		t.Fatalf("stalled body: read err = %v, want the gateway to cut the response", err)
	}
}

// TestHungEngineOpensSinglePoolBreaker: on a cb_enable single pool, an
// engine that accepts requests and never answers (a wedged engine whose
// TCP probe still passes) feeds the 5xx streak with each first-byte
// timeout, as P/D legs do, so its breaker opens and traffic stops going
// to it.
func TestHungEngineOpensSinglePoolBreaker(t *testing.T) {
	o := testOptions()
	o.FirstByteTimeout = 50 * time.Millisecond
	o.Breaker5xxStreak = 2
	o.BreakerOpenFor = time.Hour
	rt, _ := newTestRuntime(t, o)
	hung, good := startEngine(t, "hung"), startEngine(t, "good")
	hung.SetHang(true)
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, hung.Addr(), 1), epFor(t, good.Addr(), 1))
	r.CircuitBreaker = true
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	c := testClient()
	url := ruleURL(r) + "/v1/completions"
	for range 4 { // round robin: two reach the hung engine
		post(t, c, url, completionBody)
	}
	st, _ := rt.Status(r.Key)
	if got := st.Endpoints[hung.Addr()].Breaker; got != "open" {
		t.Fatalf("hung engine's breaker after 2 first-byte timeouts = %q, want open", got)
	}
	for k := range 4 {
		if res := post(t, c, url, completionBody); res.status != http.StatusOK {
			t.Fatalf("request %d with the hung engine broken: %d %s", k, res.status, res.body)
		}
	}
}
