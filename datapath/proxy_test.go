package datapath

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/internal/fakeengine"
	"github.com/infergate/infergate/spec"
)

var hex32 = regexp.MustCompile(`^[0-9a-f]{32}$`)

func TestProxyBasics(t *testing.T) {
	rt, _ := newTestRuntime(t, testOptions())
	e := startEngine(t, "e1")
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	c := testClient()
	base := ruleURL(r)

	t.Run("minted request id", func(t *testing.T) {
		res := post(t, c, base+"/v1/completions", completionBody)
		if res.status != 200 || res.header.Get(fakeengine.HeaderEngine) != "e1" {
			t.Fatalf("status %d engine %q body %s", res.status, res.header.Get(fakeengine.HeaderEngine), res.body)
		}
		id := res.header.Get(HeaderRequestID)
		if !hex32.MatchString(id) {
			t.Fatalf("minted X-Request-Id %q is not 32 lowercase hex", id)
		}
		reqs := e.Requests()
		if got := reqs[len(reqs)-1]; got.RequestID != id || string(got.Body) != completionBody {
			t.Fatalf("engine saw id %q body %q, want %q and the client body byte-for-byte", got.RequestID, got.Body, id)
		}
	})
	t.Run("client request id kept", func(t *testing.T) {
		res := post(t, c, base+"/v1/chat/completions", `{"model":"m","messages":[]}`, HeaderRequestID, "client-id-1")
		if got := res.header.Get(HeaderRequestID); got != "client-id-1" {
			t.Fatalf("X-Request-Id = %q", got)
		}
		reqs := e.Requests()
		if got := reqs[len(reqs)-1].RequestID; got != "client-id-1" {
			t.Fatalf("engine saw %q", got)
		}
	})
	t.Run("engine status and content type kept", func(t *testing.T) {
		e.SetStatus(http.StatusTooManyRequests)
		defer e.SetStatus(0)
		res := post(t, c, base+"/v1/completions", completionBody)
		if res.status != 429 || res.header.Get("Content-Type") != "application/json" || !strings.Contains(res.body, "injected failure") {
			t.Fatalf("got %d %q %s", res.status, res.header.Get("Content-Type"), res.body)
		}
		if res.header.Get(HeaderError) != "" {
			t.Fatalf("engine error must not carry %s", HeaderError)
		}
	})
	t.Run("models proxied", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/models", nil)
		res := do(t, c, req)
		if res.status != 200 || !strings.Contains(res.body, "fake-model") {
			t.Fatalf("got %d %s", res.status, res.body)
		}
	})
}

func TestBadInput(t *testing.T) {
	o := testOptions()
	o.MaxBodyBytes = 1024
	rt, _ := newTestRuntime(t, o)
	e := startEngine(t, "e1")
	port := freePort(t)
	r := newRule("127.0.0.1", port, spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	rm := newRule("127.0.0.1", port, spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	rm.Key.ModelName = "pinned" // forces body parsing for routing
	rm.Name = "pinned"
	for _, x := range []*spec.Rule{r, rm} {
		if err := rt.Install(nil, x); err != nil {
			t.Fatal(err)
		}
	}
	c := testClient()
	base := ruleURL(r)
	big := `{"prompt":"` + strings.Repeat("x", 2048) + `"}`
	tests := []struct {
		name, method, path, body string
		chunked                  bool
		status                   int
		code                     string
	}{
		{"oversize", "POST", "/v1/completions", big, false, 413, CodeBodyTooLarge},
		{"oversize chunked", "POST", "/v1/completions", big, true, 413, CodeBodyTooLarge},
		{"malformed json", "POST", "/v1/completions", `{"model":`, false, 400, CodeInvalidJSON},
		// Single pools forward every path and method: the engine answers.
		{"wrong method", "GET", "/v1/chat/completions", "", false, 405, ""},
		{"unknown path", "POST", "/admin", "{}", false, 404, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader = strings.NewReader(tc.body)
			if tc.chunked {
				body = io.MultiReader(body) // unknown length → chunked
			}
			req, _ := http.NewRequest(tc.method, base+tc.path, body)
			res := do(t, c, req)
			if res.status != tc.status {
				t.Fatalf("status %d, want %d (%s)", res.status, tc.status, res.body)
			}
			if tc.code == "" {
				if h := res.header.Get(HeaderError); h != "" || res.header.Get(fakeengine.HeaderEngine) == "" {
					t.Fatalf("want the engine's own answer, got gateway code %q (%s)", h, res.body)
				}
				return
			}
			if got := errorCode(t, res.body); got != tc.code || res.header.Get(HeaderError) != tc.code {
				t.Fatalf("code %q header %q, want %q", got, res.header.Get(HeaderError), tc.code)
			}
		})
	}
	// The listener still serves, and model routing works for good bodies.
	if res := post(t, c, base+"/v1/completions", `{"model":"pinned","prompt":"x"}`); res.status != 200 {
		t.Fatalf("after bad input: %d %s", res.status, res.body)
	}
}

func TestPanicRecovered(t *testing.T) {
	rt, m := newTestRuntime(t, testOptions())
	rt.hookServe = func(r *http.Request) {
		if r.Header.Get("X-Panic") != "" {
			panic("boom")
		}
	}
	e := startEngine(t, "e1")
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	c := testClient()
	res := post(t, c, ruleURL(r)+"/v1/completions", completionBody, "X-Panic", "1")
	if res.status != 500 || errorCode(t, res.body) != CodeInternal {
		t.Fatalf("got %d %s", res.status, res.body)
	}
	if got := metricValue(t, m.Panics); got != 1 {
		t.Fatalf("panics_total = %v", got)
	}
	if res := post(t, c, ruleURL(r)+"/v1/completions", completionBody); res.status != 200 {
		t.Fatalf("after panic: %d", res.status)
	}
}

func TestBindFailureLeavesNothing(t *testing.T) {
	rt, m := newTestRuntime(t, testOptions())
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyPort := uint16(busy.Addr().(*net.TCPAddr).Port)
	e := startEngine(t, "e1")
	tests := []struct {
		name   string
		vip    string
		port   uint16
		status int
		hint   string // what the operator can do, in the daemon's own flag name
	}{
		{"address in use", "127.0.0.1", busyPort, http.StatusConflict, "in use"},
		{"not a local address", "192.0.2.10", freePort(t), http.StatusBadRequest, "--bind-any-vip"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRule(tc.vip, tc.port, spec.SelRoundRobin, epFor(t, e.Addr(), 1))
			err := rt.Install(nil, r)
			ae, ok := apierror.As(err)
			if !ok || ae.Status != tc.status || ae.Code != apierror.CodeBindFailed {
				t.Fatalf("Install error = %v, want %d bind_failed", err, tc.status)
			}
			if !strings.Contains(ae.Message, r.Key.ListenAddr().String()) {
				t.Fatalf("message %q does not name the address", ae.Message)
			}
			if !strings.Contains(ae.Message, tc.hint) {
				t.Fatalf("message %q lacks the hint %q", ae.Message, tc.hint)
			}
			if _, found := rt.Status(r.Key); found {
				t.Fatal("failed rule is visible in Status")
			}
			if got := metricValue(t, m.Listeners); got != 0 {
				t.Fatalf("listeners = %v after failed install", got)
			}
		})
	}
}

func TestBindAnyVIP(t *testing.T) {
	o := testOptions()
	o.BindAnyVIP = true
	rt, _ := newTestRuntime(t, o)
	e := startEngine(t, "e1")
	port := freePort(t)
	r := newRule("192.0.2.10", port, spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	if err := rt.Install(nil, r); err != nil {
		t.Fatalf("Install with BindAnyVIP: %v", err)
	}
	res := post(t, testClient(), fmt.Sprintf("http://127.0.0.1:%d/v1/completions", port), completionBody)
	if res.status != 200 {
		t.Fatalf("via wildcard: %d %s", res.status, res.body)
	}
}

func TestTwoVIPsSamePort(t *testing.T) {
	rt, _ := newTestRuntime(t, testOptions())
	a, b := startEngine(t, "a"), startEngine(t, "b")
	port := freePort(t)
	ra := newRule("127.0.0.2", port, spec.SelRoundRobin, epFor(t, a.Addr(), 1))
	rb := newRule("127.0.0.3", port, spec.SelRoundRobin, epFor(t, b.Addr(), 1))
	for _, r := range []*spec.Rule{ra, rb} {
		if err := rt.Install(nil, r); err != nil {
			t.Fatal(err)
		}
	}
	c := testClient()
	for _, tc := range []struct {
		r    *spec.Rule
		want string
	}{{ra, "a"}, {rb, "b"}, {ra, "a"}} {
		res := post(t, c, ruleURL(tc.r)+"/v1/completions", completionBody)
		if got := res.header.Get(fakeengine.HeaderEngine); res.status != 200 || got != tc.want {
			t.Fatalf("%s: engine %q status %d, want %q", tc.r.Key.VIP, got, res.status, tc.want)
		}
	}
}

func TestRoutingOnSharedListener(t *testing.T) {
	rt, _ := newTestRuntime(t, testOptions())
	port := freePort(t)
	eng := map[string]*fakeengine.Server{}
	mk := func(name string, f func(*spec.Key)) {
		eng[name] = startEngine(t, name)
		r := newRule("127.0.0.1", port, spec.SelRoundRobin, epFor(t, eng[name].Addr(), 1))
		r.Name = name
		f(&r.Key)
		if err := rt.Install(nil, r); err != nil {
			t.Fatal(err)
		}
	}
	mk("llama", func(k *spec.Key) { k.ModelName = "llama" })
	mk("qwen", func(k *spec.Key) { k.ModelName = "qwen" })
	mk("chat-exact", func(k *spec.Key) { k.PathPrefix, k.PathMatchMode = "/v1/chat/completions", pathMatchExact })
	mk("host", func(k *spec.Key) { k.Host = "api.example.test" })
	c := testClient()
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	tests := []struct {
		name, path, body, xmodel, host string
		want                           string // engine, or error code
	}{
		{"model from body", "/v1/completions", `{"model":"qwen"}`, "", "", "qwen"},
		{"model header wins", "/v1/completions", `{"model":"qwen"}`, "llama", "", "llama"},
		{"model beats path", "/v1/chat/completions", `{"model":"llama","messages":[]}`, "", "", "llama"},
		{"exact path", "/v1/chat/completions", `{"model":"other","messages":[]}`, "", "", "chat-exact"},
		{"host", "/v1/completions", `{"model":"other"}`, "", "api.example.test", "host"},
		{"no match", "/v1/completions", `{"model":"other"}`, "", "", CodeNoMatchingRule},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, base+tc.path, strings.NewReader(tc.body))
			if tc.xmodel != "" {
				req.Header.Set(HeaderModel, tc.xmodel)
			}
			if tc.host != "" {
				req.Host = tc.host
			}
			res := do(t, c, req)
			if tc.want == CodeNoMatchingRule {
				if res.status != 404 || errorCode(t, res.body) != CodeNoMatchingRule {
					t.Fatalf("got %d %s", res.status, res.body)
				}
				return
			}
			if got := res.header.Get(fakeengine.HeaderEngine); got != tc.want {
				t.Fatalf("routed to %q (%d), want %q", got, res.status, tc.want)
			}
		})
	}
}

// A P/D rule with only role-0 endpoints has no pair: every request is served
// unsplit by the role-0 pool, and the rule is not ready.
func TestPDRuleOnlyRole0ServesUnsplit(t *testing.T) {
	rt, _ := newTestRuntime(t, testOptions())
	e := startEngine(t, "e1")
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	r.PD = &spec.PD{}
	r.Engine = spec.EngineVLLM
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	res := post(t, testClient(), ruleURL(r)+"/v1/completions", completionBody)
	if res.status != http.StatusOK || res.header.Get(fakeengine.HeaderEngine) != "e1" {
		t.Fatalf("got %d %s", res.status, res.body)
	}
	st, ok := rt.Status(r.Key)
	if !ok || st.Ready {
		t.Fatalf("status = %+v, %v; want not ready", st, ok)
	}
}

func TestDialFailureRetriedAndAllFail(t *testing.T) {
	rt, m := newTestRuntime(t, testOptions())
	e := startEngine(t, "good")
	dead := fmt.Sprintf("127.0.0.1:%d", freePort(t)) // nothing listens
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, dead, 1), epFor(t, e.Addr(), 1))
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	c := testClient()
	for k := range 6 {
		if res := post(t, c, ruleURL(r)+"/v1/completions", completionBody); res.status != 200 {
			t.Fatalf("request %d: %d %s (dial failures must be retried)", k, res.status, res.body)
		}
	}
	if got := metricValue(t, m.Retries.WithLabelValues(r.Name)); got < 1 {
		t.Fatalf("retries = %v, want ≥ 1", got)
	}
	if got := metricValue(t, m.Failover.WithLabelValues(r.Name)); got < 1 {
		t.Fatalf("failover = %v, want ≥ 1", got)
	}
	e.Close()
	res := post(t, c, ruleURL(r)+"/v1/completions", completionBody)
	if res.status != http.StatusBadGateway || errorCode(t, res.body) != CodeBackendUnreachable {
		t.Fatalf("all dead: %d %s", res.status, res.body)
	}
}

// TestBodyReadDeadline: a client that stalls mid-body gets a 400 once the
// body deadline (the listener's ReadTimeout) passes, while a stream lasting
// twice that deadline after a complete body is relayed to its end.
func TestBodyReadDeadline(t *testing.T) {
	o := testOptions()
	o.BodyReadTimeout = 300 * time.Millisecond
	rt, _ := newTestRuntime(t, o)
	e := startEngine(t, "slow", func(fo *fakeengine.Options) { fo.TokenDelay = 150 * time.Millisecond; fo.Tokens = 5 })
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}

	res := post(t, testClient(), ruleURL(r)+"/v1/completions", `{"stream":true}`)
	if res.status != http.StatusOK || strings.Count(res.body, "data:") < 5 || !strings.Contains(res.body, "[DONE]") {
		t.Fatalf("stream longer than the body deadline: %d %q", res.status, res.body)
	}

	nc, err := net.DialTimeout("tcp", strings.TrimPrefix(ruleURL(r), "http://"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(nc, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{\""); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || resp.Header.Get(HeaderError) != CodeBadRequestBody {
		t.Fatalf("stalled body: %d %v", resp.StatusCode, resp.Header)
	}
}

func TestAllDownIs503(t *testing.T) {
	rt, _ := newTestRuntime(t, testOptions())
	a, b := startEngine(t, "a"), startEngine(t, "b")
	a.SetHealth(500)
	b.SetHealth(500)
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, a.Addr(), 1), epFor(t, b.Addr(), 1))
	r.Probe = spec.Probe{Type: "http", Request: "/health", Timeout: time.Second, Retries: 1}
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "endpoints down", func() bool {
		st, _ := rt.Status(r.Key)
		return st.Endpoints[a.Addr()].State == "down" && st.Endpoints[b.Addr()].State == "down"
	})
	res := post(t, testClient(), ruleURL(r)+"/v1/completions", completionBody)
	if res.status != 503 || errorCode(t, res.body) != CodeNoHealthyBackend || res.header.Get(HeaderError) != CodeNoHealthyBackend {
		t.Fatalf("got %d %s", res.status, res.body)
	}
	if a.Served()+b.Served() != 0 {
		t.Fatal("a down endpoint received a completion")
	}
}

func TestProbeStateMachine(t *testing.T) {
	o := testOptions()
	o.ProbeRise = 2
	rt, _ := newTestRuntime(t, o)
	e := startEngine(t, "e")
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	r.Probe = spec.Probe{Type: "http", Request: "/health", Response: "ok", Timeout: time.Second, Retries: 2}
	e.SetHealth(500)
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	state := func() string { st, _ := rt.Status(r.Key); return st.Endpoints[e.Addr()].State }
	if s := state(); s != "probing" && s != "down" {
		t.Fatalf("new endpoint state %q, want probing", s)
	}
	waitFor(t, 5*time.Second, "down", func() bool { return state() == "down" })
	e.SetHealth(200)
	waitFor(t, 5*time.Second, "active", func() bool { return state() == "active" })
	if st, _ := rt.Status(r.Key); !st.Ready {
		t.Fatalf("not ready when active: %+v", st)
	}
	// tcp probes only need the port.
	r2 := *r
	r2.Generation++
	r2.Probe = spec.Probe{Type: "tcp", Timeout: time.Second, Retries: 1}
	if err := rt.Install(r, &r2); err != nil {
		t.Fatal(err)
	}
	e.Close()
	waitFor(t, 5*time.Second, "down after kill", func() bool { return state() == "down" })
}

func TestApplyProbeTable(t *testing.T) {
	tests := []struct {
		name    string
		start   int32
		results string // '+' success, '-' failure
		retries int
		rise    int
		want    int32
	}{
		{"probing passes once", healthProbing, "+", 2, 2, healthActive},
		{"probing fails below retries", healthProbing, "-", 2, 2, healthProbing},
		{"probing fails to down", healthProbing, "--", 2, 2, healthDown},
		{"active one miss stays", healthActive, "-+-", 2, 2, healthActive},
		{"active down after streak", healthActive, "+--", 2, 2, healthDown},
		{"down needs rise", healthDown, "+", 2, 2, healthDown},
		{"down rises", healthDown, "++", 2, 2, healthActive},
		{"down rise broken", healthDown, "+-+", 2, 2, healthDown},
		{"retries 0 means 1", healthActive, "-", 0, 2, healthDown},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ep := &endpoint{}
			ep.health.Store(tc.start)
			for _, c := range tc.results {
				applyProbe(ep, c == '+', tc.retries, tc.rise)
			}
			if got := ep.health.Load(); got != tc.want {
				t.Fatalf("state %s, want %s", healthName(got), healthName(tc.want))
			}
		})
	}
}

func TestBreakerTable(t *testing.T) {
	cfg := breakerConfig{enabled: true, connectFails: 3, streak5xx: 2, openFor: time.Hour}
	type step struct {
		ev string // "dial", "200", "500", "404", "expire", "admit"
	}
	tests := []struct {
		name  string
		steps []string
		want  int32
	}{
		{"dial failures below threshold", []string{"dial", "dial"}, breakerClosed},
		{"dial failures open", []string{"dial", "dial", "dial"}, breakerOpen},
		{"success resets dial count", []string{"dial", "dial", "200", "dial"}, breakerClosed},
		{"5xx streak opens", []string{"500", "500"}, breakerOpen},
		{"4xx is neutral", []string{"500", "404", "500"}, breakerOpen},
		{"2xx resets streak", []string{"500", "200", "500"}, breakerClosed},
		{"open stays before window", []string{"dial", "dial", "dial", "admit"}, breakerOpen},
		{"half-open after window", []string{"dial", "dial", "dial", "expire", "admit"}, breakerHalfOpen},
		{"half-open success closes", []string{"dial", "dial", "dial", "expire", "admit", "200"}, breakerClosed},
		{"half-open 5xx reopens", []string{"dial", "dial", "dial", "expire", "admit", "500"}, breakerOpen},
		{"half-open dial reopens", []string{"dial", "dial", "dial", "expire", "admit", "dial"}, breakerOpen},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b breaker
			for _, s := range tc.steps {
				switch s {
				case "dial":
					b.onDialFailure(&cfg)
				case "expire":
					b.openUntil.Store(0)
				case "admit":
					b.admit()
				default:
					var code int
					fmt.Sscan(s, &code)
					b.onResponse(&cfg, code)
				}
			}
			if got := b.state.Load(); got != tc.want {
				t.Fatalf("state %s, want %s", breakerName(got), breakerName(tc.want))
			}
		})
	}
}

func TestBreakerTripsOn5xxAndRecovers(t *testing.T) {
	o := testOptions()
	o.Breaker5xxStreak = 3
	o.BreakerOpenFor = 300 * time.Millisecond
	rt, m := newTestRuntime(t, o)
	bad, good := startEngine(t, "bad"), startEngine(t, "good")
	bad.SetStatus(500)
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, bad.Addr(), 1), epFor(t, good.Addr(), 1))
	r.CircuitBreaker = true
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	c := testClient()
	url := ruleURL(r) + "/v1/completions"
	for range 6 {
		post(t, c, url, completionBody)
	}
	st, _ := rt.Status(r.Key)
	if st.Endpoints[bad.Addr()].Breaker != "open" {
		t.Fatalf("breaker after 3 5xx = %+v", st.Endpoints[bad.Addr()])
	}
	before := bad.Served()
	for k := range 10 {
		if res := post(t, c, url, completionBody); res.status != 200 {
			t.Fatalf("request %d while open: %d", k, res.status)
		}
	}
	if bad.Served() != before {
		t.Fatal("open breaker still sent requests to the failing endpoint")
	}
	bad.SetStatus(0)
	waitFor(t, 5*time.Second, "breaker closes after the window", func() bool {
		post(t, c, url, completionBody)
		st, _ := rt.Status(r.Key)
		return st.Endpoints[bad.Addr()].Breaker == "closed"
	})
	if got := metricValue(t, m.CBFlips); got < 3 {
		t.Fatalf("cb flips = %v, want ≥ 3 (open, half-open, closed)", got)
	}
}

func TestSSEFirstEventBeforeEngineFinishes(t *testing.T) {
	rt, _ := newTestRuntime(t, testOptions())
	e := startEngine(t, "e", func(o *fakeengine.Options) { o.Tokens = 3 })
	e.Gate()
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	r.SSE = true
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, ruleURL(r)+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true,"messages":[]}`))
	resp, err := testClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	br := bufio.NewReader(resp.Body)
	first, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(first, "data: ") || !strings.Contains(first, "tok0") {
		t.Fatalf("first event %q err %v", first, err)
	}
	if e.Served() != 0 || e.InFlight() != 1 {
		t.Fatal("engine finished before the client saw the first event")
	}
	e.Release()
	rest, err := io.ReadAll(br)
	if err != nil || !strings.Contains(string(rest), "tok2") || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("rest %q err %v", rest, err)
	}
}

func TestMaxStreamDuration(t *testing.T) {
	rt, _ := newTestRuntime(t, testOptions())
	e := startEngine(t, "e", func(o *fakeengine.Options) { o.Tokens = 1000; o.TokenDelay = 20 * time.Millisecond })
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	r.MaxStreamDuration = 200 * time.Millisecond
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	res := post(t, testClient(), ruleURL(r)+"/v1/completions", `{"stream":true}`)
	if !strings.HasSuffix(res.body, sseStreamCappedLine) || strings.Contains(res.body, "[DONE]") {
		t.Fatalf("stream not capped: ...%q", res.body[max(0, len(res.body)-120):])
	}
}

func TestClientDisconnectCancelsUpstream(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stream bool
	}{{"hung non-stream", false}, {"mid-stream", true}} {
		t.Run(tc.name, func(t *testing.T) {
			rt, _ := newTestRuntime(t, testOptions())
			e := startEngine(t, "e", func(o *fakeengine.Options) { o.Tokens = 3 })
			if tc.stream {
				e.Gate()
			} else {
				e.SetHang(true)
			}
			r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.Addr(), 1))
			if err := rt.Install(nil, r); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			body := fmt.Sprintf(`{"stream":%v}`, tc.stream)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ruleURL(r)+"/v1/completions", strings.NewReader(body))
			req.Header.Set(HeaderRequestID, "disc-1")
			errc := make(chan error, 1)
			go func() {
				resp, err := testClient().Do(req)
				if err == nil {
					_, err = io.ReadAll(resp.Body)
					resp.Body.Close()
				}
				errc <- err
			}()
			waitFor(t, 5*time.Second, "engine has the request", func() bool { return e.InFlight() == 1 })
			cancel()
			// No timing assert (the box is shared): the engine must see the
			// close at all; how fast is logged and measured by the benchmarks.
			gone := time.Now()
			select {
			case id := <-e.ClientGone():
				if id != "disc-1" {
					t.Fatalf("engine saw close of %q", id)
				}
				t.Logf("engine saw the client disconnect after %v", time.Since(gone))
			case <-time.After(10 * time.Second):
				t.Fatal("engine never saw the connection close after the client disconnect")
			}
			<-errc
		})
	}
}

func TestHungEngineTimesOut(t *testing.T) {
	o := testOptions()
	o.FirstByteTimeout = 50 * time.Millisecond
	rt, _ := newTestRuntime(t, o)
	e := startEngine(t, "e")
	e.SetHang(true)
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	r.IdleTimeout = 100 * time.Millisecond
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	res := post(t, testClient(), ruleURL(r)+"/v1/completions", completionBody)
	if res.status != http.StatusGatewayTimeout || errorCode(t, res.body) != CodeUpstreamTimeout {
		t.Fatalf("got %d %s", res.status, res.body)
	}
}

func TestDroppedConnectionIs502(t *testing.T) {
	rt, _ := newTestRuntime(t, testOptions())
	e := startEngine(t, "e")
	e.SetDrop(true)
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	res := post(t, testClient(), ruleURL(r)+"/v1/completions", completionBody)
	if res.status != http.StatusBadGateway || errorCode(t, res.body) != CodeUpstreamError {
		t.Fatalf("got %d %s", res.status, res.body)
	}
	if n := len(e.Requests()); n != 1 {
		t.Fatalf("engine got %d requests; a sent request must never be replayed", n)
	}
}

// load runs workers that POST until stop is closed and counts outcomes.
type load struct {
	ok, failed atomic.Int64
	wg         sync.WaitGroup
	stop       chan struct{}
	mu         sync.Mutex
	errs       []string
}

func startLoad(t *testing.T, url string, workers int) *load {
	t.Helper()
	l := &load{stop: make(chan struct{})}
	c := testClient()
	for range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for k := 0; k < 100000; k++ { // bounded
				select {
				case <-l.stop:
					return
				default:
				}
				resp, err := c.Post(url, "application/json", strings.NewReader(completionBody))
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != 200 {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				if err != nil {
					l.failed.Add(1)
					l.mu.Lock()
					if len(l.errs) < 5 {
						l.errs = append(l.errs, err.Error())
					}
					l.mu.Unlock()
					continue
				}
				l.ok.Add(1)
			}
		}()
	}
	return l
}

func (l *load) finish() { close(l.stop); l.wg.Wait() }

func TestUpdateUnderLoad(t *testing.T) {
	rt, _ := newTestRuntime(t, testOptions())
	engines := []*fakeengine.Server{startEngine(t, "a"), startEngine(t, "b"), startEngine(t, "c")}
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, engines[0].Addr(), 1), epFor(t, engines[1].Addr(), 1))
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	l := startLoad(t, ruleURL(r)+"/v1/completions", 8)
	prev := r
	sels := []spec.Selector{spec.SelRoundRobin, spec.SelWeightedRR, spec.SelLeastConn, spec.SelSourceHash}
	for k := range 40 {
		next := *prev
		next.Generation++
		next.Selector = sels[k%len(sels)]
		// rotate the pool: always keep one old endpoint, add another
		next.Endpoints = []spec.Endpoint{epFor(t, engines[k%3].Addr(), 1+k%3), epFor(t, engines[(k+1)%3].Addr(), 1)}
		if err := rt.Install(prev, &next); err != nil {
			t.Fatal(err)
		}
		prev = &next
		time.Sleep(5 * time.Millisecond)
	}
	l.finish()
	if l.failed.Load() != 0 || l.ok.Load() == 0 {
		t.Fatalf("ok %d failed %d: %v", l.ok.Load(), l.failed.Load(), l.errs)
	}
}

func TestEndpointKilledMidRun(t *testing.T) {
	rt, _ := newTestRuntime(t, testOptions())
	slow := func(o *fakeengine.Options) { o.Latency = 2 * time.Millisecond }
	a, b, victim := startEngine(t, "a", slow), startEngine(t, "b", slow), startEngine(t, "victim", slow)
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, a.Addr(), 1), epFor(t, b.Addr(), 1), epFor(t, victim.Addr(), 1))
	r.CircuitBreaker = true
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	const workers = 8
	l := startLoad(t, ruleURL(r)+"/v1/completions", workers)
	waitFor(t, 5*time.Second, "victim serving", func() bool { return victim.Served() > 20 })
	failedAtKill := l.failed.Load() // before the kill: its own failures count after
	okAtKill := l.ok.Load()
	victim.Close()
	waitFor(t, 10*time.Second, "traffic after the kill", func() bool { return l.ok.Load() > okAtKill+300 })
	l.finish()
	// Only the requests on the victim when it died may fail (≤ one per worker).
	if lost := l.failed.Load() - failedAtKill; lost > workers || failedAtKill != 0 {
		t.Fatalf("failed before kill %d, after kill %d (> %d in flight): %v", failedAtKill, lost, workers, l.errs)
	}
}

func TestDeleteUnderLoadDrains(t *testing.T) {
	rt, m := newTestRuntime(t, testOptions())
	e := startEngine(t, "e", func(o *fakeengine.Options) { o.Latency = 300 * time.Millisecond })
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	const n = 6
	results := make(chan int, n)
	for range n {
		go func() {
			resp, err := testClient().Post(ruleURL(r)+"/v1/completions", "application/json", strings.NewReader(completionBody))
			if err != nil {
				results <- -1
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			results <- resp.StatusCode
		}()
	}
	waitFor(t, 5*time.Second, "requests in flight", func() bool { return e.InFlight() == n })
	rt.Remove(r)
	// The port is free at once: new connections are refused...
	if c, err := net.DialTimeout("tcp", r.Key.ListenAddr().String(), time.Second); err == nil {
		c.Close()
		t.Fatal("listener still accepts after Remove")
	}
	// ...while every in-flight request completes.
	for range n {
		if s := <-results; s != 200 {
			t.Fatalf("in-flight request got %d during drain", s)
		}
	}
	if _, ok := rt.Status(r.Key); ok {
		t.Fatal("removed rule still has status")
	}
	if err := rt.Install(nil, r); err != nil {
		t.Fatalf("re-create on the freed address: %v", err)
	}
	// The re-created rule's series are live (not deleted with the old one).
	before := metricValue(t, m.Requests)
	if res := post(t, testClient(), ruleURL(r)+"/v1/completions", completionBody); res.status != 200 {
		t.Fatalf("after re-create: %d", res.status)
	}
	if after := metricValue(t, m.Requests); after != before+1 {
		t.Fatalf("requests_total %v → %v after one request on the re-created rule", before, after)
	}
}

func TestStateSurvivesUpdate(t *testing.T) {
	o := testOptions()
	o.BreakerOpenFor = time.Hour
	o.BreakerConnectFailures = 1
	rt, _ := newTestRuntime(t, o)
	good := startEngine(t, "good")
	dead := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, dead, 1), epFor(t, good.Addr(), 1))
	r.CircuitBreaker = true
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	c := testClient()
	for range 2 {
		post(t, c, ruleURL(r)+"/v1/completions", completionBody)
	}
	breakerOf := func(id string) string { st, _ := rt.Status(r.Key); return st.Endpoints[id].Breaker }
	if got := breakerOf(dead); got != "open" {
		t.Fatalf("dead endpoint breaker %q, want open", got)
	}
	next := *r
	next.Generation++
	next.Selector = spec.SelLeastConn
	next.Endpoints = append(slices.Clone(r.Endpoints), epFor(t, startEngine(t, "new").Addr(), 0))
	if err := rt.Install(r, &next); err != nil {
		t.Fatal(err)
	}
	if got := breakerOf(dead); got != "open" {
		t.Fatalf("breaker after update %q, want open (state keyed by endpoint ID)", got)
	}
	st, _ := rt.Status(r.Key)
	if got := st.Endpoints[next.Endpoints[2].ID].State; got != "draining" {
		t.Fatalf("weight-0 endpoint state %q, want draining", got)
	}
}

func TestSlowClientBodyBounded(t *testing.T) {
	o := testOptions()
	o.BodyReadTimeout = 100 * time.Millisecond
	rt, _ := newTestRuntime(t, o)
	e := startEngine(t, "e")
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", r.Key.ListenAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"model\"")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("stalled body: no answer: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || resp.Header.Get(HeaderError) != CodeBadRequestBody {
		t.Fatalf("stalled body: %d %q", resp.StatusCode, resp.Header.Get(HeaderError))
	}
	if n := len(e.Requests()); n != 0 {
		t.Fatalf("engine got %d requests", n)
	}
}
