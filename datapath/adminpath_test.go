package datapath

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/infergate/infergate/datapath/pd"
	"github.com/infergate/infergate/spec"
	"github.com/infergate/infergate/tenant"
)

// pathRecorder is a fake engine that answers 200 to every path and records
// each request's method, path and header: what reached the engine.
type pathRecorder struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []*http.Request
}

func startPathRecorder(t *testing.T) *pathRecorder {
	t.Helper()
	p := &pathRecorder{}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.seen = append(p.seen, r.Clone(r.Context()))
		p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *pathRecorder) addr() string { return p.srv.Listener.Addr().String() }

// paths are the paths the engine received, in order.
func (p *pathRecorder) paths() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, len(p.seen))
	for i, r := range p.seen {
		out[i] = r.URL.Path
	}
	return out
}

func (p *pathRecorder) headers() []http.Header {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]http.Header, len(p.seen))
	for i, r := range p.seen {
		out[i] = r.Header
	}
	return out
}

// TestAdminPathsClosedByDefault: a single pool keeps its engine's admin APIs
// from clients (403 admin_path_denied, counted, never sent), by engine; a
// rule that names no engine closes every engine's; allow_admin_paths and an
// exact allowed_paths entry open them; ordinary paths are untouched.
func TestAdminPathsClosedByDefault(t *testing.T) {
	rt, m := newTestRuntime(t, testOptions())
	eng := startPathRecorder(t)
	type rcase struct {
		method, path string
		denied       bool
	}
	rules := []struct {
		name  string
		mod   func(*spec.Rule)
		cases []rcase
	}{
		{"vllm", func(r *spec.Rule) { r.Engine, r.Admin.Engine = spec.EngineVLLM, spec.EngineVLLM }, []rcase{
			{"POST", "/sleep", true}, {"POST", "/wake_up", true}, {"POST", "/collective_rpc", true},
			{"POST", "/reset_prefix_cache", true}, {"POST", "/start_profile", true}, {"POST", "/stop_profile", true},
			{"POST", "/scale_elastic_ep", true}, {"POST", "/v1/load_lora_adapter", true}, {"POST", "/v1/unload_lora_adapter", true},
			{"POST", "/sleep/", true}, {"POST", "//sleep", true}, {"GET", "/sleep", true}, {"POST", "/sl%65ep", true},
			{"POST", "/sleep?level=2", true},
			{"POST", "/flush_cache", false}, // SGLang's, not vLLM's: the engine answers
			{"POST", "/v1/completions", false}, {"GET", "/v1/models", false}, {"GET", "/health", false},
			{"POST", "/sleeping", false},
		}},
		{"sglang", func(r *spec.Rule) { r.Engine, r.Admin.Engine = spec.EngineSGLang, spec.EngineSGLang }, []rcase{
			{"POST", "/flush_cache", true}, {"GET", "/flush_cache", true}, {"POST", "/update_weights_from_disk", true},
			{"POST", "/shutdown", true}, {"POST", "/release_memory_occupation", true}, {"POST", "/load_lora_adapter", true},
			{"PUT", "/hicache/storage-backend", true}, {"POST", "/abort_request", true},
			{"POST", "/generate", false}, {"POST", "/v1/chat/completions", false},
		}},
		{"trtllm", func(r *spec.Rule) { r.Engine, r.Admin.Engine = spec.EngineTRTLLM, spec.EngineTRTLLM }, []rcase{
			{"GET", "/kv_cache_events", true}, {"POST", "/kv_cache_events", true},
			{"GET", "/metrics", false}, {"POST", "/v1/completions", false},
		}},
		{"llamacpp", func(r *spec.Rule) { r.Engine, r.Admin.Engine = spec.EngineLlamaCpp, spec.EngineLlamaCpp }, []rcase{
			{"POST", "/slots/0?action=erase", true}, {"GET", "/slots", true}, {"POST", "/lora-adapters", true},
			{"POST", "/completion", false},
		}},
		{"no engine named: every engine's", func(r *spec.Rule) { r.Engine = spec.EngineVLLM }, []rcase{
			{"POST", "/sleep", true}, {"POST", "/flush_cache", true}, {"GET", "/kv_cache_events", true}, {"GET", "/slots", true},
			{"POST", "/v1/completions", false},
		}},
		{"allow_admin_paths", func(r *spec.Rule) { r.Admin = spec.AdminSurface{Engine: spec.EngineVLLM, Open: true} }, []rcase{
			{"POST", "/sleep", false}, {"POST", "/v1/load_lora_adapter", false},
		}},
		{"trtllm allow_admin_paths: the event drain stays closed", func(r *spec.Rule) {
			r.Engine, r.Admin = spec.EngineTRTLLM, spec.AdminSurface{Engine: spec.EngineTRTLLM, Open: true}
		}, []rcase{
			{"POST", "/kv_cache_events", true}, {"GET", "/kv_cache_events", true}, {"POST", "//kv_cache_events/", true},
			{"POST", "/kv%5Fcache_events", true}, {"POST", "/perf_metrics", false},
		}},
		{"trtllm allowed_paths names the drain", func(r *spec.Rule) {
			r.Engine, r.Admin.Engine = spec.EngineTRTLLM, spec.EngineTRTLLM
			r.AllowedPaths = []string{"/kv_cache_events", "/perf_metrics", "/v1/*"}
		}, []rcase{
			{"POST", "/kv_cache_events", true}, {"POST", "/perf_metrics", false}, {"POST", "/v1/completions", false},
		}},
		{"no engine named, allow_admin_paths: every engine's drain stays closed", func(r *spec.Rule) {
			r.Engine, r.Admin = spec.EngineVLLM, spec.AdminSurface{Open: true}
		}, []rcase{
			{"POST", "/kv_cache_events", true}, {"POST", "/sleep", false},
		}},
		{"allowed_paths names one", func(r *spec.Rule) {
			r.Admin.Engine = spec.EngineVLLM
			r.AllowedPaths = []string{"/v1/load_lora_adapter", "/v1/*", "/sleep/*"}
		}, []rcase{
			{"POST", "/v1/load_lora_adapter", false},
			{"POST", "/v1/unload_lora_adapter", true}, // a prefix entry opens no admin path
			{"POST", "/sleep", true},
			{"POST", "/v1/completions", false},
		}},
	}
	c := testClient()
	for _, rc := range rules {
		t.Run(rc.name, func(t *testing.T) {
			r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, eng.addr(), 1))
			r.Name = "admin-" + rc.name
			rc.mod(r)
			if err := rt.Install(nil, r); err != nil {
				t.Fatal(err)
			}
			denied := 0
			for _, tc := range rc.cases {
				before := len(eng.paths())
				req, _ := http.NewRequest(tc.method, ruleURL(r)+tc.path, nil)
				res := do(t, c, req)
				reached := len(eng.paths()) > before
				if tc.denied {
					denied++
					if res.status != http.StatusForbidden || errorCode(t, res.body) != CodeAdminPathDenied {
						t.Errorf("%s %s: %d %s, want 403 %s", tc.method, tc.path, res.status, res.body, CodeAdminPathDenied)
					}
					if reached {
						t.Errorf("%s %s reached the engine", tc.method, tc.path)
					}
					continue
				}
				if res.status != http.StatusOK || !reached {
					t.Errorf("%s %s: %d %s (reached engine: %v), want the engine's 200", tc.method, tc.path, res.status, res.body, reached)
				}
			}
			if got := metricValue(t, m.Requests.WithLabelValues(r.Name, "", "403", CodeAdminPathDenied)); got != float64(denied) {
				t.Errorf("admin_path_denied counted %v, want %d", got, denied)
			}
		})
	}
}

// TestAdminPathsClosedOnKeyedRules: a valid API key does not open an admin
// path (the key holder is a tenant, not the engine's operator).
func TestAdminPathsClosedOnKeyedRules(t *testing.T) {
	keys, err := tenant.Open(tenant.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	o := testOptions()
	o.Keys = keys
	rt, _ := newTestRuntime(t, o)
	eng := startPathRecorder(t)
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, eng.addr(), 1))
	r.APIKeys = spec.KeysRequired
	r.Admin.Engine = spec.EngineSGLang
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	k, err := keys.Create(tenant.KeySpec{TenantID: "t", Name: "k"})
	if err != nil {
		t.Fatal(err)
	}
	c := testClient()
	for _, path := range []string{"/flush_cache", "/update_weights_from_disk", "/shutdown"} {
		res := post(t, c, ruleURL(r)+path, `{"model_path":"/tmp/x"}`, "X-Api-Key", k.RawKey)
		if res.status != http.StatusForbidden || errorCode(t, res.body) != CodeAdminPathDenied {
			t.Errorf("POST %s with a valid key: %d %s, want 403 %s", path, res.status, res.body, CodeAdminPathDenied)
		}
	}
	if got := eng.paths(); len(got) != 0 {
		t.Errorf("engine received %v", got)
	}
	if res := post(t, c, ruleURL(r)+"/v1/completions", `{"model":"m","prompt":"x"}`, "X-Api-Key", k.RawKey); res.status != http.StatusOK {
		t.Errorf("a completion with the key: %d %s", res.status, res.body)
	}
}

// TestAdminPathsClosedOnPD: P/D rules answer admin paths 403 too, on every
// engine (the prober and the KV-exact poller reach engines directly).
func TestAdminPathsClosedOnPD(t *testing.T) {
	for _, tc := range []struct {
		engine spec.Engine
		path   string
	}{
		{spec.EngineVLLM, "/sleep"},
		{spec.EngineVLLM, "/v1/load_lora_adapter"},
		{spec.EngineSGLang, "/flush_cache"},
		{spec.EngineTRTLLM, "/kv_cache_events"},
	} {
		t.Run(string(tc.engine)+tc.path, func(t *testing.T) {
			f := newPDFleet(t, pdTestOptions(), tc.engine, 1, 1, func(r *spec.Rule) { r.Admin.Engine = tc.engine })
			res := post(t, testClient(), f.url(tc.path), `{}`)
			if res.status != http.StatusForbidden || errorCode(t, res.body) != CodeAdminPathDenied {
				t.Fatalf("POST %s: %d %s, want 403 %s", tc.path, res.status, res.body, CodeAdminPathDenied)
			}
		})
	}
}

func TestCanonicalAdminPath(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/sleep", "/sleep"},
		{"/sleep/", "/sleep"},
		{"//sleep", "/sleep"},
		{"/v1//load_lora_adapter//", "/v1/load_lora_adapter"},
		{"/", "/"},
		{"//", "/"},
	} {
		if got := canonicalAdminPath(tc.in); got != tc.want {
			t.Errorf("canonicalAdminPath(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestAdminGatePrefix: a prefix entry closes its base and what lies below
// it, not a longer name that only starts with it; allowed_paths opens an
// exact path below it.
func TestAdminGatePrefix(t *testing.T) {
	g := &adminGate{exact: map[string]struct{}{}, prefixes: []string{"/slots", "/hicache"}, named: map[string]struct{}{"/slots/7": {}}}
	for _, tc := range []struct {
		path string
		want bool
	}{
		{"/slots", true}, {"/slots/", true}, {"//slots", true}, {"/slots/0", true}, {"/slots//0/", true},
		{"/slotsX", false}, {"/slots_x/0", false}, {"/slot", false}, {"/hicache/storage-backend", true},
		{"/slots/7", false}, {"/slots/7/", false}, {"/v1/completions", false}, {"/", false}, {"", false},
	} {
		if got := g.denies(tc.path); got != tc.want {
			t.Errorf("denies(%q) = %v, want %v", tc.path, got, tc.want)
		}
	}
}

// TestAdminGateHint: the length-and-letter filter in front of the exact
// paths changes no answer: each gate (every engine, closed, open, with an
// allowed path) answers every path as the same gate with a filter that
// passes everything does, over the admin paths, their trailing-slash and
// one-letter variants, and inference paths.
func TestAdminGateHint(t *testing.T) {
	paths := []string{"", "/", "/v1/completions", "/v1/chat/completions", "/v1/responses", "/v1/models",
		"/health", "/metrics", "/v1/embeddings", "/x", "/v1/load_lora_adapter/"}
	var rules []*spec.Rule
	for _, e := range []spec.Engine{"", spec.EngineVLLM, spec.EngineSGLang, spec.EngineTRTLLM, spec.EngineLlamaCpp} {
		for _, open := range []bool{false, true} {
			r := &spec.Rule{}
			r.Admin.Engine, r.Admin.Open = e, open
			rules = append(rules, r)
		}
		r := &spec.Rule{AllowedPaths: []string{"/sleep", "/slots/*"}}
		r.Admin.Engine = e
		rules = append(rules, r)
		for _, p := range pd.AdminPaths(e) {
			p = strings.TrimSuffix(p, "/*")
			paths = append(paths, p, p+"/", "/"+p, p[:len(p)-1]+"z", "/Z"+p[2:])
		}
	}
	for _, r := range rules {
		g := newAdminGate(r)
		if g == nil {
			continue
		}
		all := *g
		for i := range all.hint {
			all.hint[i] = ^uint32(0)
		}
		for _, p := range paths {
			if got, want := g.denies(p), all.denies(p); got != want {
				t.Errorf("engine %q open %v: denies(%q) = %v, unfiltered %v", r.Admin.Engine, r.Admin.Open, p, got, want)
			}
		}
		for p := range g.exact {
			if !g.denies(p) {
				t.Errorf("engine %q: closed exact path %q not denied", r.Admin.Engine, p)
			}
		}
	}
}
