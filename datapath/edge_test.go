package datapath

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/spec"
	dto "github.com/prometheus/client_model/go"
)

// rawConn opens a client connection to addr from the loopback address src
// (127.0.0.x), closed when the test ends, with a 10 s deadline. It is nil
// when the gateway's refusal (a reset) arrived before the handshake ended.
func rawConn(t *testing.T, src string, addr netip.AddrPort) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr.String())
	if errors.Is(err, syscall.ECONNRESET) {
		return nil
	}
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, src, err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// served reports whether a request on c is answered (true) or the
// connection was closed by the gateway without an answer (false).
func served(t *testing.T, c net.Conn, path string) bool {
	t.Helper()
	if c == nil {
		return false
	}
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path); err != nil {
		return false
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("no answer and no close within the deadline")
	}
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return true
}

// clientFrom is a keep-alive client whose connections come from src.
func clientFrom(src string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 4}}
}

// edgeRuntime is newTestRuntime reporting on a full metric set, so the
// edge family can be read.
type edgeRuntime struct {
	*Runtime
	m *metrics.Metrics
}

func newEdgeRuntime(t *testing.T, o Options) edgeRuntime {
	t.Helper()
	m := metrics.New()
	rt := NewWithMetrics(o, m, nil)
	closeAtEnd(t, rt)
	return edgeRuntime{rt, m}
}

func edgeRefused(t *testing.T, rt edgeRuntime, reason string) float64 {
	t.Helper()
	var d dto.Metric
	if err := rt.m.Edge.Refused.WithLabelValues(reason).Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.Counter.GetValue()
}

// TestConnectionLimitPerVIP: a rule's connectionLimit caps its VIP's
// connections; rules sharing the address share the smallest cap; an update
// lifting it admits again.
func TestConnectionLimitPerVIP(t *testing.T) {
	rt := newEdgeRuntime(t, testOptions())
	e := startEngine(t, "e")
	port := freePort(t)
	r := newRule("127.0.0.1", port, spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	r.ConnectionLimit = 5
	r2 := newRule("127.0.0.1", port, spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	r2.Key.PathMatchMode, r2.Key.PathPrefix, r2.Name = "prefix", "/v1/chat", "chat"
	r2.ConnectionLimit = 2
	for _, x := range []*spec.Rule{r, r2} {
		if err := rt.Install(nil, x); err != nil {
			t.Fatal(err)
		}
	}
	addr := r.Key.ListenAddr()
	a, b := rawConn(t, "127.0.0.2", addr), rawConn(t, "127.0.0.3", addr)
	if !served(t, a, "/v1/models") || !served(t, b, "/v1/models") {
		t.Fatal("connections within the cap were not served")
	}
	if served(t, rawConn(t, "127.0.0.4", addr), "/v1/models") {
		t.Fatal("a third connection was served over connectionLimit 2 (the smaller of the two rules')")
	}
	if n := edgeRefused(t, rt, metrics.RefusedListener); n != 1 {
		t.Fatalf("listener refusals = %v, want 1", n)
	}
	if !served(t, a, "/v1/models") {
		t.Fatal("an admitted keep-alive connection stopped being served")
	}
	next := *r2
	next.ConnectionLimit, next.Generation = 0, 2
	if err := rt.Install(r2, &next); err != nil {
		t.Fatal(err)
	}
	if !served(t, rawConn(t, "127.0.0.4", addr), "/v1/models") {
		t.Fatal("after lifting the smaller cap the other rule's 5 must apply")
	}
}

// TestPerIPFloodDoesNotStarveOthers: idle connections from one address stop
// at the per-IP cap; another client keeps being served.
func TestPerIPFloodDoesNotStarveOthers(t *testing.T) {
	o := testOptions()
	o.Admission.MaxConnsPerIP = 10
	rt := newEdgeRuntime(t, o)
	e := startEngine(t, "e")
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	addr := r.Key.ListenAddr()
	for range 30 {
		rawConn(t, "127.0.0.2", addr) // idle: never sends a byte
	}
	waitFor(t, 10*time.Second, "the flood to be admitted or refused", func() bool {
		return edgeRefused(t, rt, metrics.RefusedPerIP) == 20
	})
	if n := rt.gate.Open(); n != 10 {
		t.Fatalf("open connections = %d, want the per-IP cap of 10", n)
	}
	good := clientFrom("127.0.0.3")
	for i := range 20 {
		if res := post(t, good, ruleURL(r)+"/v1/completions", completionBody); res.status != 200 {
			t.Fatalf("good client request %d: %d %s", i, res.status, res.body)
		}
	}
}

// TestGlobalCapKeepsProbesAndUpstreamWorking: at the global cap new client
// connections are refused, and health probes and engine connections (which
// do not pass the gate) still work.
func TestGlobalCapKeepsProbesAndUpstreamWorking(t *testing.T) {
	o := testOptions()
	o.Admission.MaxConns = 8
	o.Admission.EvictIdleAfter = 0 // refuse at the cap (eviction: TestIdleFloodEvictedAtGlobalCap)
	rt := newEdgeRuntime(t, o)
	e := startEngine(t, "e")
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	r.Probe = spec.Probe{Type: "http", Request: "/health", Response: "ok", Timeout: time.Second, Retries: 1}
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	addr := r.Key.ListenAddr()
	keep := rawConn(t, "127.0.0.9", addr)
	if !served(t, keep, "/v1/models") {
		t.Fatal("first connection not served")
	}
	for i := range 20 {
		rawConn(t, fmt.Sprintf("127.0.0.%d", 10+i), addr)
	}
	waitFor(t, 10*time.Second, "the flood to fill the global cap", func() bool {
		return edgeRefused(t, rt, metrics.RefusedGlobal) == 13
	})
	state := func() string { st, _ := rt.Status(r.Key); return st.Endpoints[e.Addr()].State }
	e.SetHealth(500)
	waitFor(t, 10*time.Second, "probes to see the engine down at the cap", func() bool { return state() == "down" })
	e.SetHealth(200)
	waitFor(t, 10*time.Second, "probes to see it back at the cap", func() bool { return state() == "active" })
	for range 5 {
		if !served(t, keep, "/v1/models") {
			t.Fatal("an admitted connection stopped being served at the cap")
		}
	}
}

// TestIdleFloodEvictedAtGlobalCap: idle connections from many addresses
// fill the global cap; a new client still gets served because its
// connections evict the longest-idle ones.
func TestIdleFloodEvictedAtGlobalCap(t *testing.T) {
	o := testOptions()
	o.Admission.MaxConns = 10
	o.Admission.EvictIdleAfter = time.Nanosecond
	rt := newEdgeRuntime(t, o)
	e := startEngine(t, "e")
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	addr := r.Key.ListenAddr()
	for i := range 10 {
		rawConn(t, fmt.Sprintf("127.0.0.%d", 10+i), addr) // idle: never sends
	}
	waitFor(t, 10*time.Second, "the flood to fill the cap", func() bool { return rt.gate.Open() == 10 })
	good := clientFrom("127.0.0.3")
	for i := range 10 {
		if res := post(t, good, ruleURL(r)+"/v1/completions", completionBody); res.status != 200 {
			t.Fatalf("good client request %d at the cap: %d %s", i, res.status, res.body)
		}
	}
	var d dto.Metric
	_ = rt.m.Edge.Evicted.Write(&d)
	if d.Counter.GetValue() < 1 {
		t.Fatal("no eviction counted")
	}
	if rt.gate.Open() > 10 {
		t.Fatalf("open = %d over the cap of 10", rt.gate.Open())
	}
}

// TestIdleKeepAliveClosed: a keep-alive connection idle past the admission
// idle timeout is closed by the gateway.
func TestIdleKeepAliveClosed(t *testing.T) {
	o := testOptions()
	o.Admission.IdleTimeout = 100 * time.Millisecond
	rt, _ := newTestRuntime(t, o)
	e := startEngine(t, "e")
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	c := rawConn(t, "127.0.0.2", r.Key.ListenAddr())
	fmt.Fprintf(c, "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	// The 10 s deadline is far beyond the idle timeout: an EOF here is the
	// gateway closing the idle connection, a timeout is it keeping it.
	_, err = br.ReadByte()
	if err != io.EOF {
		t.Fatalf("idle keep-alive connection: read = %v, want EOF (closed by the gateway)", err)
	}
	waitFor(t, 5*time.Second, "the slot to be released", func() bool { return rt.gate.Open() == 0 })
}

// TestHeadersOnlyBodiesCostNothing: connections that declare 32 MiB bodies
// and send none hold a few KiB each, not their declared size.
func TestHeadersOnlyBodiesCostNothing(t *testing.T) {
	rt, _ := newTestRuntime(t, testOptions())
	e := startEngine(t, "e")
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	r.Key.ModelName = "fake-model" // a model-pinned rule reads bodies to route (others stream them)
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	const n = 30
	conns := make([]net.Conn, n)
	for i := range conns {
		conns[i] = rawConn(t, "127.0.0.2", r.Key.ListenAddr())
		fmt.Fprintf(conns[i], "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", 32<<20)
	}
	waitFor(t, 10*time.Second, "every request to wait for its body", func() bool { return rt.bodies.InFlight() >= n*4096 })
	var during runtime.MemStats
	runtime.ReadMemStats(&during)
	if got := rt.bodies.InFlight(); got != n*4096 {
		t.Fatalf("%d headers-only 32 MiB requests hold %d body bytes, want one 4 KiB chunk each", n, got)
	}
	// Declared sizes allocated up front would be 960 MiB here.
	if grew := int64(during.HeapAlloc) - int64(before.HeapAlloc); grew > 64<<20 {
		t.Fatalf("heap grew %d MiB for %d headers-only requests", grew>>20, n)
	}
	for _, c := range conns {
		_ = c.Close()
	}
	waitFor(t, 10*time.Second, "the body charges to be returned", func() bool { return rt.bodies.InFlight() == 0 })
}

// TestBodyBudgetOverloaded: over the in-flight body budget a request gets
// 503 overloaded with Retry-After and never reaches an engine; the next
// request fits again.
func TestBodyBudgetOverloaded(t *testing.T) {
	o := testOptions()
	o.Bodies.MaxInFlightBytes = 64 << 10
	rt := newEdgeRuntime(t, o)
	e := startEngine(t, "e")
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	r.Key.ModelName = "fake-model" // a model-pinned rule reads bodies to route (others stream them)
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	c := testClient()
	big := `{"model":"m","prompt":"` + strings.Repeat("x", 200<<10) + `"}`
	res := post(t, c, ruleURL(r)+"/v1/completions", big)
	if res.status != http.StatusServiceUnavailable || errorCode(t, res.body) != CodeOverloaded || res.header.Get(headerRetryAfter) == "" {
		t.Fatalf("over budget: %d %q Retry-After %q", res.status, res.header.Get(HeaderError), res.header.Get(headerRetryAfter))
	}
	if n := len(e.Requests()); n != 0 {
		t.Fatalf("engine got %d requests", n)
	}
	if res := post(t, c, ruleURL(r)+"/v1/completions", completionBody); res.status != 200 {
		t.Fatalf("small request after an overload: %d %s", res.status, res.body)
	}
	var d dto.Metric
	_ = rt.m.Edge.BodyOverloaded.Write(&d)
	if d.Counter.GetValue() != 1 {
		t.Fatalf("overloaded counter = %v, want 1", d.Counter.GetValue())
	}
	if rt.bodies.InFlight() != 0 {
		t.Fatalf("%d body bytes still charged after both requests", rt.bodies.InFlight())
	}
}

// TestPathShapeRejected: paths that mean something else once normalised
// are answered 400 invalid_path and never reach an engine.
func TestPathShapeRejected(t *testing.T) {
	rt, _ := newTestRuntime(t, testOptions())
	e := startEngine(t, "e")
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		target string
		bad    bool
	}{
		{"/v1/models/../../admin", true},
		{"/v1/models/%2e%2e/%2e%2e/admin", true},
		{"/v1/models/%2E%2E/admin", true},
		{"/v1/models/..%2f..%2fadmin", true},
		{"/v1/models%2fadmin", true},
		{"/v1/models/a%2Fb", true},
		{"/v1/models/%5c..%5cadmin", true},
		{"/v1/models/.", true},
		{"/./v1/models", true},
		{"/v1/models/a%00b", true},
		{"/v1/models/fake-model", false},
		{"/v1/models/a..b", false},
		{"/v1/models/.hidden", false},
	} {
		t.Run(tc.target, func(t *testing.T) {
			before := len(e.Requests())
			c := rawConn(t, "127.0.0.2", r.Key.ListenAddr())
			fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", tc.target)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			rejected := resp.StatusCode == http.StatusBadRequest && resp.Header.Get(HeaderError) == CodeInvalidPath
			if rejected != tc.bad {
				t.Fatalf("status %d %q, want rejected=%v", resp.StatusCode, resp.Header.Get(HeaderError), tc.bad)
			}
			if reached := len(e.Requests()) > before; tc.bad && reached {
				t.Fatal("a rejected path reached the engine")
			}
		})
	}
}

// hopEngine is a raw HTTP/1.1 engine that answers every request with a
// response carrying a header named in its Connection header, and records
// the request headers it received.
func hopEngine(t *testing.T) (string, *atomic.Pointer[http.Header]) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var last atomic.Pointer[http.Header]
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for ctx.Err() == nil {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					h := req.Header.Clone()
					last.Store(&h)
					_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"+
						"Connection: keep-alive, X-Secret-Hop\r\nX-Secret-Hop: s3cret\r\nKeep-Alive: timeout=5\r\n"+
						"X-Kept: yes\r\nContent-Length: 2\r\n\r\n{}")
				}
			}()
		}
	}()
	t.Cleanup(func() { cancel(); _ = l.Close(); <-done })
	return l.Addr().String(), &last
}

// TestConnectionNamedHeadersStripped: fields named in Connection are
// connection-scoped in both directions.
func TestConnectionNamedHeadersStripped(t *testing.T) {
	rt, _ := newTestRuntime(t, testOptions())
	addr, last := hopEngine(t)
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, addr, 1))
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	for _, extra := range [][]string{nil, {"X-Client-Header", "present"}} { // parsed into the client map, and not
		hdr := append([]string{"Connection", "X-Client-Hop", "X-Client-Hop", "secret"}, extra...)
		res := post(t, testClient(), ruleURL(r)+"/v1/completions", completionBody, hdr...)
		if res.status != 200 {
			t.Fatalf("status %d %s", res.status, res.body)
		}
		for _, k := range []string{"X-Secret-Hop", "Keep-Alive"} {
			if v := res.header.Get(k); v != "" {
				t.Errorf("client received the engine's hop-by-hop %s: %q", k, v)
			}
		}
		if res.header.Get("X-Kept") != "yes" || res.header.Get(HeaderRequestID) == "" {
			t.Errorf("end-to-end headers lost: %v", res.header)
		}
		if h := last.Load(); h == nil || h.Get("X-Client-Hop") != "" {
			t.Errorf("engine received the client's hop-by-hop X-Client-Hop: %v", h)
		}
	}
}

// TestUnspecifiedVIPRefused: 0.0.0.0 and :: listen on every interface and
// are refused unless the operator opted in.
func TestUnspecifiedVIPRefused(t *testing.T) {
	rt, m := newTestRuntime(t, testOptions())
	e := startEngine(t, "e")
	for _, vip := range []string{"0.0.0.0", "::"} {
		r := newRule(vip, freePort(t), spec.SelRoundRobin, epFor(t, e.Addr(), 1))
		err := rt.Install(nil, r)
		ae, ok := apierror.As(err)
		if !ok || ae.Status != http.StatusBadRequest || ae.Code != apierror.CodeUnspecifiedVIP || ae.Field != "serviceArguments.externalIP" {
			t.Fatalf("%s: Install = %v, want 400 unspecified_vip on serviceArguments.externalIP", vip, err)
		}
		if !strings.Contains(ae.Message, "--allow-unspecified-vip") {
			t.Fatalf("message %q lacks the opt-in flag", ae.Message)
		}
		if _, found := rt.Status(r.Key); found || metricValue(t, m.Listeners) != 0 {
			t.Fatal("a refused rule left state behind")
		}
	}
	o := testOptions()
	o.AllowUnspecifiedVIP = true
	opted := New(o, nil, nil)
	if err := opted.checkVIP(spec.Key{VIP: netip.IPv4Unspecified(), Port: 1}); err != nil {
		t.Fatalf("with the opt-in: %v", err)
	}
	_ = opted.Close(context.Background())
}
