package datapath

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/fakeengine"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/spec"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// testOptions are fast defaults for tests: quick probes, short windows.
func testOptions() Options {
	o := DefaultOptions()
	o.ProbeInterval = 20 * time.Millisecond
	o.BreakerOpenFor = 200 * time.Millisecond
	o.DrainGrace = 5 * time.Second
	o.DialTimeout = time.Second
	return withTestRelayLoops(o)
}

// closeAtEnd closes rt when the test ends and checks it left no datapath
// goroutine behind. Registered before the test's engines, it runs after
// their cleanups (last-first), so the check sees them closed too.
func closeAtEnd(t *testing.T, rt *Runtime) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rt.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
		assertNoDatapathGoroutines(t)
	})
}

// newTestRuntime starts a runtime that is closed when the test ends.
func newTestRuntime(t *testing.T, o Options) (*Runtime, *metrics.Datapath) {
	t.Helper()
	m := metrics.NewDatapath(prometheus.NewRegistry())
	rt := New(withTestFrontEnd(o), m, nil)
	closeAtEnd(t, rt)
	return rt, m
}

// startEngine starts a fake engine closed when the test ends.
func startEngine(t *testing.T, name string, mod ...func(*fakeengine.Options)) *fakeengine.Server {
	t.Helper()
	o := fakeengine.Options{Name: name}
	for _, f := range mod {
		f(&o)
	}
	s, err := fakeengine.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func epFor(t *testing.T, addr string, weight int) spec.Endpoint {
	t.Helper()
	ap := netip.MustParseAddrPort(addr)
	return spec.Endpoint{ID: ap.String(), Addr: ap, Weight: weight}
}

// newRule builds a compiled rule on vip:port with probes off.
func newRule(vip string, port uint16, sel spec.Selector, eps ...spec.Endpoint) *spec.Rule {
	return &spec.Rule{
		Key:         spec.Key{VIP: netip.MustParseAddr(vip), Port: port, Protocol: "tcp"},
		Name:        "test-" + vip,
		Generation:  1,
		Selector:    sel,
		Probe:       spec.Probe{Type: "none"},
		IdleTimeout: 10 * time.Second,
		Endpoints:   eps,
	}
}

func ruleURL(r *spec.Rule) string {
	return "http://" + r.Key.ListenAddr().String()
}

// testClient is a keep-alive client bounded in time.
func testClient() *http.Client {
	return &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true},
	}
}

type result struct {
	status int
	header http.Header
	body   string
}

func post(t *testing.T, c *http.Client, url, body string, hdr ...string) result {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return do(t, c, req)
}

func do(t *testing.T, c *http.Client, req *http.Request) result {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return result{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// errorCode decodes an OpenAI-shaped error body.
func errorCode(t *testing.T, body string) string {
	t.Helper()
	var v struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("error body is not JSON: %v: %q", err, body)
	}
	if v.Error.Message == "" || v.Error.Type == "" {
		t.Fatalf("error body lacks message/type: %q", body)
	}
	return v.Error.Code
}

// waitFor polls cond every 5 ms up to d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

const completionBody = `{"model":"fake-model","prompt":"hello","max_tokens":4}`

func mustAddrPort(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// metricValue reads a single-series counter or gauge (testutil would need a
// module go.mod does not carry).
func metricValue(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 16)
	c.Collect(ch)
	close(ch)
	var sum float64
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		switch {
		case d.Counter != nil:
			sum += d.Counter.GetValue()
		case d.Gauge != nil:
			sum += d.Gauge.GetValue()
		}
	}
	return sum
}

// assertNoDatapathGoroutines fails when a listener, prober or request
// goroutine of the datapath outlives Close.
func assertNoDatapathGoroutines(t *testing.T) {
	t.Helper()
	var leaked []byte
	for range 200 { // ≤ 2 s
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		leaked = nil
		for _, g := range bytes.Split(buf, []byte("\n\n")) {
			if bytes.Contains(g, []byte("infergate/datapath.")) && !bytes.Contains(g, []byte("assertNoDatapathGoroutines")) &&
				!bytes.Contains(g, []byte("testing.tRunner")) {
				leaked = g
				break
			}
		}
		if leaked == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("datapath goroutine outlived Close:\n%s", leaked)
}

// serveRaw runs a raw TCP engine on loopback and returns its address:
// each accepted connection goes to serve, on a goroutine of its own, with
// a reader over it. When the test ends the listener and every connection
// are closed (the gateway pools them) and the goroutines waited for.
func serveRaw(t *testing.T, serve func(c net.Conn, br *bufio.Reader)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				serve(c, bufio.NewReader(c))
			})
		}
	})
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String()
}
