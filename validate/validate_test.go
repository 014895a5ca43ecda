package validate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/api/auth"
	"github.com/infergate/infergate/internal/fakeengine"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/rules"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// fakeGateway is a test-only stand-in for the daemon: the management routes
// the workflow reads, /metrics from the real metric set, and a VIP that runs
// a prefill leg then a decode leg against real engine servers, counting the
// P/D families the way the datapath does.
type fakeGateway struct {
	t        *testing.T
	m        *metrics.Metrics
	rule     rules.Rule
	prefill  string
	decode   string
	skipPre  bool   // behave like a gateway that never runs the prefill leg
	kv       string // "": plain 1P1D; kvOK, kvParity, kvDisconnected: cache-aware KV-exact
	breaker  bool   // report the decode endpoint's breaker open
	api, vip *http.Server
	apiAddr  string
	token    string // non-empty: the API requires "Bearer <token>"
	leaked   atomic.Bool

	mu   sync.Mutex
	seen map[string]bool // prompt prefixes already routed (Tier 1 / 1.5 memory)
}

// Fake gateway KV behaviours.
const (
	kvOK           = "ok"           // inventory trusted, repeated prefixes hit Tier 1.5
	kvParity       = "parity"       // inventory populated, Tier 1.5 never hits (block size mismatch)
	kvDisconnected = "disconnected" // the subscriber to the prefill is down
	// kvLearned: like kvOK, but the engines publish 16-token blocks while the
	// rule says kvBlockSize 32; the gateway keys with the learned size, so
	// Tier 1.5 hits and only the inventory's block_size shows the mistake.
	kvLearned = "learned"
	fakeRule  = "pd-test"
)

// gatewayBehaviour configures a fakeGateway before it serves.
type gatewayBehaviour struct {
	skipPre, breaker bool
	kv               string
}

func startFakeGateway(t *testing.T, prefill, decode string, b gatewayBehaviour) *fakeGateway {
	t.Helper()
	g := &fakeGateway{t: t, m: metrics.New(), prefill: prefill, decode: decode,
		skipPre: b.skipPre, kv: b.kv, breaker: b.breaker, seen: map[string]bool{}}
	vln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	aln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	vip := vln.Addr().(*net.TCPAddr)
	ep := func(addr string, role int) rules.Endpoint {
		h, p, _ := net.SplitHostPort(addr)
		n, _ := strconv.Atoi(p)
		return rules.Endpoint{EndpointIP: h, TargetPort: n, Weight: 1, EPRole: role}
	}
	g.rule = rules.Rule{
		ServiceArguments: rules.ServiceArguments{ExternalIP: "127.0.0.1", Port: vip.Port, Protocol: "tcp", Mode: 4,
			Name: "pd-test", PDDisaggMode: true, KVEngineType: "vllm", SSEMode: true},
		Endpoints: []rules.Endpoint{ep(prefill, 1), ep(decode, 2)},
	}
	g.apiAddr = aln.Addr().String()
	g.api = &http.Server{Handler: http.HandlerFunc(g.serveAPI), ReadHeaderTimeout: 5 * time.Second}
	g.vip = &http.Server{Handler: http.HandlerFunc(g.serveVIP), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = g.api.Serve(aln) }()
	go func() { _ = g.vip.Serve(vln) }()
	t.Cleanup(func() { _ = g.api.Close(); _ = g.vip.Close() })
	return g
}

func (g *fakeGateway) serveAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if g.token != "" && r.Header.Get("Authorization") != "Bearer "+g.token {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"code":401,"message":"token","result":"Unauthorized","error_code":"unauthorized"}`)
		return
	}
	switch p := r.URL.Path; {
	case p == "/metrics":
		promhttp.HandlerFor(g.m.Registry, promhttp.HandlerOpts{}).ServeHTTP(w, r)
	case p == "/netlox/v1/config/loadbalancer/all":
		_ = json.NewEncoder(w).Encode(rules.RuleList{LbAttr: []rules.Rule{g.rule}})
	case strings.HasSuffix(p, "/compiled"):
		eps := []map[string]any{}
		for _, e := range g.rule.Endpoints {
			id := net.JoinHostPort(e.EndpointIP, strconv.Itoa(e.TargetPort))
			eps = append(eps, map[string]any{"id": id, "address": id, "weight": e.Weight, "role": roleOf(e.EPRole)})
		}
		view := map[string]any{"name": fakeRule, "engine": "vllm", "sse": true,
			"pd": map[string]any{"cache_aware": g.kv != ""}, "endpoints": eps}
		if g.kv != "" {
			view["kv"] = map[string]any{"mode": 1, "zmq_port": 5557, "block_size": 32, "hash_algo": "sha256_cbor"}
		}
		_ = json.NewEncoder(w).Encode(view)
	case p == "/netlox/v1/config/ai/kv/inventory":
		rows := []map[string]any{}
		if g.kv != "" {
			rows = append(rows, map[string]any{"rule": fakeRule, "endpoint": g.prefill, "rank": 0, "source": "zmq",
				"blocks": 40, "connected": g.kv != kvDisconnected, "trusted": g.kv != kvDisconnected, "block_size": 32})
			if g.kv == kvLearned {
				rows[0]["block_size"] = 16
			}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"rows": rows})
	case strings.HasSuffix(p, "/status"):
		st := map[string]any{}
		for _, e := range g.rule.Endpoints {
			br := "closed"
			if g.breaker && e.EPRole == 2 {
				br = "open"
			}
			st[net.JoinHostPort(e.EndpointIP, strconv.Itoa(e.TargetPort))] = map[string]string{"state": "active", "breaker": br}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"ready": true, "endpoints": st})
	default:
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"error":{"code":"not_found"}}`)
	}
}

func (g *fakeGateway) serveVIP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "" {
		g.leaked.Store(true)
	}
	body, _ := io.ReadAll(r.Body)
	const rule = fakeRule
	if !g.skipPre {
		resp, err := http.Post("http://"+g.prefill+r.URL.Path, "application/json", bytes.NewReader(body))
		if err != nil {
			g.m.PD.Requests.WithLabelValues(rule, "", "prefill", "error").Inc()
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, `{"error":{"code":"backend_unreachable"}}`)
			return
		}
		pre, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			// A refused prefill caches nothing: no prefix to match later.
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(resp.StatusCode)
			_, _ = w.Write(pre)
			return
		}
		g.m.PD.PrefillDuration.WithLabelValues(rule).Observe(0.001)
	}
	if g.kv != "" {
		g.tiers(body)
	}
	resp, err := http.Post("http://"+g.decode+r.URL.Path, "application/json", bytes.NewReader(body))
	if err != nil {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	g.m.PD.DecodeTTFB.WithLabelValues(rule).Observe(0.001)
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
	g.m.PD.Requests.WithLabelValues(rule, "", "complete", "success").Inc()
}

// tiers records what a cache-aware ladder would for this prompt: Tier 1
// matches a prefix seen before; Tier 1.5 hits only when the KV parity holds.
func (g *fakeGateway) tiers(body []byte) {
	var req struct {
		Prompt string `json:"prompt"`
	}
	_ = json.Unmarshal(body, &req)
	key := req.Prompt[:min(len(req.Prompt), 256)]
	g.mu.Lock()
	seen := g.seen[key]
	g.seen[key] = true
	g.mu.Unlock()
	rate := 0.0
	if seen {
		rate = 0.95
	}
	g.m.Radix.MatchRate.WithLabelValues(fakeRule).Observe(rate)
	switch {
	case seen && (g.kv == kvOK || g.kv == kvLearned):
		g.m.KV.Routing.Tier15Hits.WithLabelValues(fakeRule).Inc()
	case g.kv == kvDisconnected:
		g.m.KV.Routing.Tier15Misses.WithLabelValues(fakeRule, "untrusted").Inc()
	default:
		g.m.KV.Routing.Tier15Misses.WithLabelValues(fakeRule, "no_match").Inc()
	}
}

func startEngine(t *testing.T, name string, o fakeengine.Options) *fakeengine.Server {
	t.Helper()
	o.Name = name
	s, err := fakeengine.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestRun(t *testing.T) {
	tests := []struct {
		name        string
		target      func(g *fakeGateway) string
		killPrefill bool
		skipPrefill bool
		kv          string
		breaker     bool
		apiDown     bool
		engine      fakeengine.Options // both engines
		passed      bool
		want        map[string]Status
		hint        map[string]Hint   // a hint the step must carry
		summary     map[string]string // text the step's summary must contain
	}{
		{name: "healthy 1P1D by name", target: func(*fakeGateway) string { return "pd-test" }, passed: true,
			want: map[string]Status{StepRuleShape: Pass, StepReadiness: Pass, StepStatus: Pass, StepNonStream: Pass,
				StepStream: Pass, StepRoles: Pass, StepCacheAware: Skip, StepKVExact: Skip, StepDrain: Skip}},
		{name: "by VIP:port", target: func(g *fakeGateway) string { return fmt.Sprintf("127.0.0.1:%d", g.rule.ServiceArguments.Port) }, passed: true,
			want: map[string]Status{StepRuleShape: Pass, StepRoles: Pass}},
		{name: "unknown rule", target: func(*fakeGateway) string { return "nope" },
			want: map[string]Status{StepRuleShape: Fail, StepReadiness: Skip, StepRoles: Skip},
			hint: map[string]Hint{StepRuleShape: HintRuleCreation}},
		{name: "management API down", target: func(*fakeGateway) string { return fakeRule }, apiDown: true,
			want:    map[string]Status{StepRuleShape: Fail, StepReadiness: Skip},
			summary: map[string]string{StepRuleShape: "management API"}},
		{name: "prefill engine killed", target: func(*fakeGateway) string { return "pd-test" }, killPrefill: true,
			want:    map[string]Status{StepReadiness: Fail, StepNonStream: Fail, StepRoles: Fail},
			hint:    map[string]Hint{StepReadiness: HintClientHangs, StepNonStream: HintClientHangs},
			summary: map[string]string{StepReadiness: "1 refused the connection"}},
		{name: "prefill engine not running: the hint says so first", target: func(*fakeGateway) string { return "pd-test" }, killPrefill: true,
			want: map[string]Status{StepReadiness: Fail},
			hint: map[string]Hint{StepReadiness: HintEngineDown}},
		{name: "prefill leg never runs", target: func(*fakeGateway) string { return "pd-test" }, skipPrefill: true,
			want: map[string]Status{StepNonStream: Pass, StepRoles: Fail},
			hint: map[string]Hint{StepRoles: HintDecodeRecomputes}},
		{name: "decode breaker open", target: func(*fakeGateway) string { return fakeRule }, breaker: true,
			want: map[string]Status{StepStatus: Fail, StepRoles: Pass},
			hint: map[string]Hint{StepStatus: HintBreaker}},
		{name: "cache-aware KV-exact healthy", target: func(*fakeGateway) string { return fakeRule }, kv: kvOK, passed: true,
			want: map[string]Status{StepRoles: Pass, StepCacheAware: Pass, StepKVExact: Pass}},
		{name: "KV block size parity broken", target: func(*fakeGateway) string { return fakeRule }, kv: kvParity, passed: true,
			want:    map[string]Status{StepRoles: Pass, StepCacheAware: Pass, StepKVExact: Warn},
			hint:    map[string]Hint{StepKVExact: HintKVZeroHits},
			summary: map[string]string{StepKVExact: "kvBlockSize 32 must equal the engines' --block-size"}},
		{name: "kvBlockSize differs from the engines' (learned) block size", target: func(*fakeGateway) string { return fakeRule }, kv: kvLearned, passed: true,
			want:    map[string]Status{StepRoles: Pass, StepCacheAware: Pass, StepKVExact: Warn},
			hint:    map[string]Hint{StepKVExact: HintKVZeroHits},
			summary: map[string]string{StepKVExact: "engines publish 16-token blocks but the rule's kvBlockSize is 32"}},
		// probes fit a small context (max_model_len from
		// /v1/models), and an SSE probe finds the path the engines stream on.
		{name: "engine with a 1024-token context", target: func(*fakeGateway) string { return fakeRule }, kv: kvOK, passed: true,
			engine: fakeengine.Options{MaxModelLen: 1024, BytesPerToken: 1},
			want:   map[string]Status{StepReadiness: Pass, StepNonStream: Pass, StepCacheAware: Pass, StepKVExact: Pass}},
		{name: "context too small for a KV-exact probe", target: func(*fakeGateway) string { return fakeRule }, kv: kvOK, passed: true,
			engine:  fakeengine.Options{MaxModelLen: 500, BytesPerToken: 1},
			want:    map[string]Status{StepKVExact: Warn},
			hint:    map[string]Hint{StepKVExact: HintEngineRefused},
			summary: map[string]string{StepKVExact: "max_model_len 500 cannot hold"}},
		{name: "engine streams only on chat", target: func(*fakeGateway) string { return fakeRule }, passed: true,
			engine:  fakeengine.Options{StreamChatOnly: true},
			want:    map[string]Status{StepNonStream: Pass, StepStream: Warn},
			hint:    map[string]Hint{StepStream: HintProbePath},
			summary: map[string]string{StepStream: "--path /v1/chat/completions"}},
		{name: "KV subscriber disconnected", target: func(*fakeGateway) string { return fakeRule }, kv: kvDisconnected,
			want: map[string]Status{StepRoles: Pass, StepKVExact: Fail},
			hint: map[string]Hint{StepKVExact: HintKVZeroHits}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pre, dec := startEngine(t, "prefill", tc.engine), startEngine(t, "decode", tc.engine)
			g := startFakeGateway(t, pre.Addr(), dec.Addr(), gatewayBehaviour{skipPre: tc.skipPrefill, kv: tc.kv, breaker: tc.breaker})
			if tc.killPrefill {
				pre.Close()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			opts := DefaultOptions()
			opts.Server, opts.Target = "http://"+g.apiAddr, tc.target(g)
			if tc.apiDown {
				_ = g.api.Close()
			}
			opts.RequestTimeout, opts.Settle = 5*time.Second, 500*time.Millisecond
			var progress bytes.Buffer
			opts.Progress = &progress
			rep, err := Run(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]StepResult{}
			for _, s := range rep.Steps {
				got[s.Name] = s
			}
			for step, want := range tc.want {
				if got[step].Status != want {
					t.Errorf("%s = %s (%s), want %s", step, got[step].Status, got[step].Summary, want)
				}
			}
			for step, h := range tc.hint {
				if !containsHint(got[step].Hints, h) {
					t.Errorf("%s hints %q lack %q", step, got[step].Hints, h)
				}
			}
			for step, want := range tc.summary {
				if !strings.Contains(got[step].Summary, want) {
					t.Errorf("%s summary %q lacks %q", step, got[step].Summary, want)
				}
			}
			if n := tc.engine.MaxModelLen; n > 0 {
				for _, r := range pre.Requests() {
					var req struct {
						Prompt string `json:"prompt"`
					}
					_ = json.Unmarshal(r.Body, &req)
					if len(req.Prompt) > n { // BytesPerToken 1: bytes are tokens
						t.Errorf("a %d-byte prompt reached an engine with a %d-token context", len(req.Prompt), n)
					}
				}
			}
			if rep.Passed != tc.passed {
				t.Errorf("passed = %v, want %v\n%s", rep.Passed, tc.passed, progress.String())
			}
		})
	}
}

func containsHint(hs []Hint, h Hint) bool {
	for _, x := range hs {
		if x == h {
			return true
		}
	}
	return false
}

func TestSnapshotDeltas(t *testing.T) {
	const before = `# TYPE c counter
c{rule="a",endpoint="x"} 1
c{rule="a",endpoint="y"} 5
c{rule="b",endpoint="x"} 7
# TYPE h histogram
h_bucket{rule="a",le="+Inf"} 2
h_sum{rule="a"} 0.5
h_count{rule="a"} 2
`
	const after = `# TYPE c counter
c{rule="a",endpoint="x"} 4
c{rule="a",endpoint="y"} 5
c{rule="b",endpoint="x"} 9
# TYPE h histogram
h_bucket{rule="a",le="+Inf"} 5
h_sum{rule="a"} 1.5
h_count{rule="a"} 5
`
	b, err := ParseSnapshot(strings.NewReader(before))
	if err != nil {
		t.Fatal(err)
	}
	a, err := ParseSnapshot(strings.NewReader(after))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"per endpoint of rule a", formatDeltas(deltaBy(b, a, "c", labelEndpoint, Labels{labelRule: "a"})), "x +3"},
		{"histogram count", fmt.Sprint(a.Sum("h_count", Labels{labelRule: "a"}) - b.Sum("h_count", nil)), "3"},
		{"histogram sum", fmt.Sprint(a.Sum("h_sum", nil) - b.Sum("h_sum", nil)), "1"},
		{"absent family", fmt.Sprint(a.Has("nope"), a.Sum("nope", nil)), "false 0"},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, tc.got, tc.want)
		}
	}
}

func TestParseAddrTarget(t *testing.T) {
	tests := []struct {
		in   string
		ok   bool
		want string
	}{
		{"127.0.0.10:8080", true, "127.0.0.10 8080 tcp"},
		{"127.0.0.10:8080/TCP", true, "127.0.0.10 8080 tcp"},
		{"[::1]:80", true, "::1 80 tcp"},
		{"vllm-1p1d", false, ""},
		{"host:80", false, ""},
	}
	for _, tc := range tests {
		a, p, proto, ok := parseAddrTarget(tc.in)
		if ok != tc.ok || (ok && fmt.Sprint(a, " ", p, " ", proto) != tc.want) {
			t.Errorf("%q: got %v %d %s %v, want %q %v", tc.in, a, p, proto, ok, tc.want, tc.ok)
		}
	}
}

// TestRuleLabel: the label validate filters metrics by is the one the
// datapath sets, including the key parts beyond VIP:port|protocol.
func TestRuleLabel(t *testing.T) {
	rule := func(name, host string) rules.Rule {
		var r rules.Rule
		r.ServiceArguments.Name = name
		r.ServiceArguments.ExternalIP = "127.0.0.10"
		r.ServiceArguments.Port = 8080
		r.ServiceArguments.Protocol = "tcp"
		r.ServiceArguments.Host = host
		return r
	}
	tests := []struct {
		name string
		r    rules.Rule
		want string
	}{
		{"named", rule("demo-1p1d", "a.example"), "demo-1p1d"},
		{"unnamed", rule("", ""), "127.0.0.10:8080|tcp"},
		{"unnamed with host", rule("", "a.example"), "127.0.0.10:8080|tcp|host=a.example"},
	}
	for _, tc := range tests {
		if got := ruleLabel(tc.r); got != tc.want {
			t.Errorf("%s: ruleLabel = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestRunWithToken: against a gateway whose API needs a token, validate
// sends it to the API (scrapes, status, rule look-ups) and never to the VIP
// or the engines.
func TestRunWithToken(t *testing.T) {
	const tok = "validate-0123456789abcdef0123456789"
	pre, dec := startEngine(t, "prefill", fakeengine.Options{}), startEngine(t, "decode", fakeengine.Options{})
	g := startFakeGateway(t, pre.Addr(), dec.Addr(), gatewayBehaviour{})
	g.token = tok
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := DefaultOptions()
	opts.Server, opts.Target = "http://"+g.apiAddr, fakeRule
	opts.RequestTimeout, opts.Settle = 5*time.Second, 500*time.Millisecond
	if rep, err := Run(ctx, opts); err != nil || rep.Passed {
		t.Fatalf("without a token: passed=%v err=%v, want a failed run", rep != nil && rep.Passed, err)
	}
	opts.Token = auth.NewToken(tok)
	rep, err := Run(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Passed {
		t.Fatalf("with the token: %+v", rep.Steps)
	}
	if g.leaked.Load() {
		t.Fatal("the API token was sent to the VIP")
	}
	for _, e := range []*fakeengine.Server{pre, dec} {
		for _, r := range e.Requests() {
			if r.Header.Get("Authorization") != "" {
				t.Fatal("the API token reached an engine")
			}
		}
	}
}
