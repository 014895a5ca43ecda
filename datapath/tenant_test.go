package datapath

import (
	"net/http"
	"strings"
	"testing"

	"github.com/infergate/infergate/internal/fakeengine"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/spec"
	"github.com/infergate/infergate/tenant"
	"github.com/prometheus/client_golang/prometheus"
)

// keyedRule serves one fake engine on 127.0.0.1 with api_key_auth "required", and
// returns the runtime's key store.
func keyedRule(t *testing.T, mod ...func(*fakeengine.Options)) (*spec.Rule, *tenant.Registry, *metrics.Tenant, func() []string) {
	t.Helper()
	keys, err := tenant.Open(tenant.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	o := testOptions()
	o.Keys = keys
	rt, _ := newTestRuntime(t, o)
	tm := metrics.NewTenant(prometheus.NewRegistry())
	rt.tm = tm
	eng := startEngine(t, "e1", mod...)
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, eng.Addr(), 1))
	r.APIKeys = spec.KeysRequired
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	seen := func() []string {
		var out []string
		for _, q := range eng.Requests() {
			out = append(out, q.Header.Get("X-Api-Key")+"|"+q.Header.Get("Authorization")+"|"+string(q.Body))
		}
		return out
	}
	return r, keys, tm, seen
}

func TestKeyEnforcementOnVIP(t *testing.T) {
	r, keys, _, seen := keyedRule(t)
	ip := func(n int) *int { return &n }
	good, err := keys.Create(tenant.KeySpec{TenantID: "t", Name: "good", AllowedModels: []string{"fake-model"}})
	if err != nil {
		t.Fatal(err)
	}
	off, _ := keys.Create(tenant.KeySpec{TenantID: "t", Name: "off", Enabled: new(false)})
	lim, _ := keys.Create(tenant.KeySpec{TenantID: "t", Name: "lim", RateLimitRPS: ip(1)})
	c := testClient()
	url := ruleURL(r) + "/v1/completions"
	body := `{"model":"fake-model","prompt":"hello","max_tokens":4}`
	cases := []struct {
		name   string
		hdr    []string
		body   string
		status int
		code   string
	}{
		{"no key", nil, body, 401, tenant.CodeInvalidAPIKey},
		{"wrong key", []string{"X-Api-Key", "lxb_0123456789abcdef_nope"}, body, 401, tenant.CodeInvalidAPIKey},
		{"disabled key", []string{"X-Api-Key", off.RawKey}, body, 401, tenant.CodeKeyDisabled},
		{"model not allowed", []string{"X-Api-Key", good.RawKey}, `{"model":"other","prompt":"x"}`, 403, tenant.CodeModelNotAllowed},
		{"right key in X-Api-Key", []string{"X-Api-Key", good.RawKey}, body, 200, ""},
		{"right key as Bearer", []string{"Authorization", "Bearer " + good.RawKey}, body, 200, ""},
		{"limited key, first", []string{"X-Api-Key", lim.RawKey}, body, 200, ""},
		{"limited key, over", []string{"X-Api-Key", lim.RawKey}, body, 429, tenant.CodeRateLimited},
	}
	for _, tc := range cases {
		res := post(t, c, url, tc.body, tc.hdr...)
		if res.status != tc.status {
			t.Fatalf("%s: status %d, want %d: %s", tc.name, res.status, tc.status, res.body)
		}
		if tc.code != "" {
			if got := errorCode(t, res.body); got != tc.code {
				t.Fatalf("%s: code %s, want %s", tc.name, got, tc.code)
			}
		}
		if tc.status == 429 && (res.header.Get("Retry-After") == "" || res.header.Get("X-Ratelimit-Remaining-Requests") != "0") {
			t.Fatalf("%s: 429 without Retry-After / x-ratelimit headers: %v", tc.name, res.header)
		}
	}
	got := seen()
	if len(got) != 3 {
		t.Fatalf("engine saw %d requests, want the 3 admitted ones: %v", len(got), got)
	}
	for _, g := range got {
		if strings.HasPrefix(g, "lxb_") || strings.Contains(g, "|Bearer") {
			t.Fatalf("the client's key reached the engine: %q", g)
		}
	}
	u, _ := keys.KeyUsage(good.KeyID)
	if u.Requests != 2 || u.PromptTokens != 2 || u.CompletionTokens != 8 || u.Rejected != 1 {
		t.Fatalf("usage from the engine's usage objects: %+v", u)
	}
}

func TestStreamUsageIsRequestedAndHidden(t *testing.T) {
	r, keys, tm, seen := keyedRule(t)
	k, _ := keys.Create(tenant.KeySpec{TenantID: "t", Name: "k"})
	c := testClient()
	url := ruleURL(r) + "/v1/completions"

	res := post(t, c, url, `{"model":"fake-model","prompt":"hi","stream":true}`, "X-Api-Key", k.RawKey)
	if res.status != 200 || !strings.Contains(res.body, "[DONE]") {
		t.Fatalf("stream: %d %q", res.status, res.body)
	}
	if strings.Contains(res.body, `"usage"`) {
		t.Fatalf("the client did not ask for usage but got it: %q", res.body)
	}
	if s := seen(); len(s) != 1 || !strings.Contains(s[0], `"stream_options":{"include_usage":true}`) {
		t.Fatalf("engine was not asked for usage: %v", s)
	}
	res = post(t, c, url, `{"model":"fake-model","prompt":"hi","stream":true,"stream_options":{"include_usage":true}}`, "X-Api-Key", k.RawKey)
	if !strings.Contains(res.body, `"usage"`) {
		t.Fatalf("the client asked for usage and did not get it: %q", res.body)
	}
	u, _ := keys.KeyUsage(k.KeyID)
	if u.Requests != 2 || u.CompletionTokens != 8 || u.EstimatedRequests != 0 {
		t.Fatalf("stream usage %+v", u)
	}
	if v := metricValue(t, tm.Tokens.WithLabelValues("t", k.KeyID, "any", "completion")); v != 8 {
		t.Fatalf("completion token metric %v", v)
	}
}

func TestRuleWithoutKeysIsOpen(t *testing.T) {
	for _, loxilb := range []bool{false, true} {
		t.Run(map[bool]string{false: "infergate", true: "loxilb"}[loxilb], func(t *testing.T) { testSSEModePolicy(t, loxilb) })
	}
}

func testSSEModePolicy(t *testing.T, loxilb bool) {
	{
		keys, _ := tenant.Open(tenant.DefaultOptions())
		o := testOptions()
		o.Keys = keys
		o.SSEModeEnforcesKeys = loxilb
		rt, _ := newTestRuntime(t, o)
		eng := startEngine(t, "e1")
		r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, eng.Addr(), 1))
		r.SSE = true // sse_mode alone enforces only with SSEModeEnforcesKeys
		if err := rt.Install(nil, r); err != nil {
			t.Fatal(err)
		}
		want := http.StatusOK
		if loxilb {
			want = http.StatusUnauthorized
		}
		if res := post(t, testClient(), ruleURL(r)+"/v1/completions", completionBody); res.status != want {
			t.Fatalf("sse_mode rule, SSEModeEnforcesKeys %v: %d %s", loxilb, res.status, res.body)
		}
	}
}

// TestPDMeteredOnceOnDecodeUsage: every dialect's client answer is the final
// leg's, so a P/D request is charged once, with the decode's usage.
func TestPDMeteredOnceOnDecodeUsage(t *testing.T) {
	for _, eng := range []spec.Engine{spec.EngineVLLM, spec.EngineSGLang, spec.EngineTRTLLM} {
		t.Run(string(eng), func(t *testing.T) {
			keys, _ := tenant.Open(tenant.DefaultOptions())
			o := pdTestOptions()
			o.Keys = keys
			f := newPDFleet(t, o, eng, 1, 1, func(r *spec.Rule) { r.APIKeys = spec.KeysRequired })
			k, _ := keys.Create(tenant.KeySpec{TenantID: "t", Name: "k"})
			for _, stream := range []bool{false, true} {
				res := post(t, testClient(), f.url("/v1/completions"), pdBody("/v1/completions", stream, ""), "X-Api-Key", k.RawKey)
				if res.status != http.StatusOK {
					t.Fatalf("stream %v: %d %s", stream, res.status, res.body)
				}
				if stream && strings.Contains(res.body, `"usage"`) {
					t.Fatalf("hidden usage chunk reached the client: %s", res.body)
				}
			}
			u, _ := keys.KeyUsage(k.KeyID)
			if u.Requests != 2 || u.EstimatedRequests != 0 || u.CompletionTokens == 0 {
				t.Fatalf("usage %+v: want 2 requests metered from engine usage", u)
			}
			if got := counterSum(t, f.reg, "infergate_tenant_requests_total", nil); got != 2 {
				t.Fatalf("tenant requests metric %v, want 2 (metered once per client request)", got)
			}
		})
	}
}

// BenchmarkKeyEnforcement is the datapath's per-request cost of a rule that
// enforces keys (admission, header edits, metering writer, settle) around a
// 1 KiB non-streaming answer; BenchmarkKeyEnforcementBaseline writes the same
// answer to the same recorder without enforcement, in the same run.
func BenchmarkKeyEnforcement(b *testing.B)         { benchKeys(b, true) }
func BenchmarkKeyEnforcementBaseline(b *testing.B) { benchKeys(b, false) }

func benchKeys(b *testing.B, enforce bool) {
	keys, _ := tenant.Open(tenant.DefaultOptions())
	k, _ := keys.Create(tenant.KeySpec{TenantID: "t", Name: "k", AllowedModels: []string{"fake-model"}, RateLimitRPS: ptrInt(1 << 29), BurstSize: ptrInt(1 << 30), TokensPerMin: ptrInt(1 << 30)})
	o := DefaultOptions()
	o.Keys = keys
	rt := New(o, nil, nil)
	c := &compiled{rule: &spec.Rule{APIKeys: spec.KeysRequired}}
	body := []byte(`{"model":"fake-model","prompt":"` + strings.Repeat("x", 900) + `","max_tokens":16}`)
	answer := []byte(`{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"` + strings.Repeat("y", 900) + `"}],"usage":{"prompt_tokens":230,"completion_tokens":16,"total_tokens":246}}`)
	req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1/v1/completions", nil)
	req.RemoteAddr = "127.0.0.1:5000"
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req.Header = http.Header{"X-Api-Key": {k.RawKey}}
		clear(w.h)
		x := &exchange{w: w, r: req}
		if enforce {
			kc, _, ok := rt.admitKey(x, c, body)
			if !ok {
				b.Fatal("refused")
			}
			x.w.WriteHeader(200)
			_, _ = x.w.Write(answer)
			rt.finishKey(kc)
		} else {
			x.w.WriteHeader(200)
			_, _ = x.w.Write(answer)
		}
	}
}

func ptrInt(v int) *int { return &v }

type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) WriteHeader(int)             {}
func (d *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
