package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/infergate/infergate/api"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/rules"
	"github.com/infergate/infergate/rules/store"
	"github.com/infergate/infergate/spec"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/sirupsen/logrus"
)

// quietLog discards output; tests assert on responses and metrics.
func quietLog() *logrus.Logger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

type harness struct {
	srv     *api.Server
	ts      *httptest.Server
	store   *store.Store
	metrics *metrics.Metrics
}

// newHarness serves the real API over loopback on a real, replayed store in a
// temp dir. replay=false leaves the store in its boot state (writes gated).
func newHarness(t testing.TB, replay bool, status api.StatusSource) *harness {
	t.Helper()
	rs, err := store.Open(store.Options{StateDir: t.TempDir(), Log: quietLog()})
	if err != nil {
		t.Fatalf("store.Open: %v", err)
	}
	if replay {
		if err := rs.Replay(context.Background()); err != nil {
			t.Fatalf("Replay: %v", err)
		}
	}
	return serve(t, rs, status)
}

func serve(t testing.TB, rs api.RuleStore, status api.StatusSource) *harness {
	t.Helper()
	return serveWith(t, rs, status, nil)
}

func serveWith(t testing.TB, rs api.RuleStore, status api.StatusSource, bootDone func() bool) *harness {
	t.Helper()
	opts := api.DefaultOptions()
	opts.Store = rs
	opts.Status = status
	opts.BootDone = bootDone
	return serveOptions(t, opts)
}

// serveOptions starts the API server of opts on loopback, with only the API
// metric family (these tests must not depend on other areas' metric
// registrations) and a quiet log.
func serveOptions(t testing.TB, opts api.Options) *harness {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := &metrics.Metrics{Registry: reg, API: metrics.NewAPI(reg)}
	opts.Metrics = m
	opts.Log = quietLog()
	srv, err := api.NewServer(opts)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	h := &harness{srv: srv, ts: ts, metrics: m}
	if s, ok := opts.Store.(*store.Store); ok {
		h.store = s
	}
	return h
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (h *harness) do(t testing.TB, method, path string, body []byte) response {
	t.Helper()
	ct := ""
	if body != nil {
		ct = "application/json"
	}
	return h.doCT(t, method, path, ct, body)
}

// doCT sends body with Content-Type ct ("" = no header).
func (h *harness) doCT(t testing.TB, method, path, ct string, body []byte) response {
	t.Helper()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, h.ts.URL+path, r)
	if err != nil {
		t.Fatalf("NewRequest: %v", err)
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	resp, err := h.ts.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// ruleBody is a valid plain rule; mutate tweaks its service arguments.
func ruleBody(t testing.TB, mutate func(sa map[string]any)) []byte {
	t.Helper()
	sa := map[string]any{
		"externalIP": "10.0.0.1", "port": 8080, "protocol": "tcp", "sel": 0, "mode": 4, "name": "r1",
	}
	if mutate != nil {
		mutate(sa)
	}
	b, err := json.Marshal(map[string]any{
		"serviceArguments": sa,
		"endpoints": []map[string]any{
			{"endpointIP": "10.1.0.1", "targetPort": 8000, "weight": 1},
			{"endpointIP": "10.1.0.2", "targetPort": 8000, "weight": 2},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustCreate(t testing.TB, h *harness, body []byte) {
	t.Helper()
	if r := h.do(t, http.MethodPost, "/netlox/v1/config/loadbalancer", body); r.status != http.StatusOK {
		t.Fatalf("create: status %d body %s", r.status, r.body)
	}
}

type errBody struct {
	Code      int    `json:"code"`
	Message   string `json:"message"`
	Result    string `json:"result"`
	ErrorCode string `json:"error_code"`
	Field     string `json:"field"`
}

// checkError asserts the full error envelope shape: code equals the HTTP
// status and every text field is populated.
func checkError(t *testing.T, r response, status int, code, field string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status = %d, want %d (body %s)", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var e errBody
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatalf("error body is not JSON: %v: %s", err, r.body)
	}
	if e.Code != status || e.ErrorCode != code || e.Message == "" || e.Result == "" {
		t.Errorf("error body = %+v, want code %d error_code %q with message and result", e, status, code)
	}
	if field != "" && e.Field != field {
		t.Errorf("field = %q, want %q", e.Field, field)
	}
}

func checkSuccess(t *testing.T, r response) {
	t.Helper()
	if r.status != http.StatusOK || strings.TrimSpace(string(r.body)) != `{"result":"Success"}` {
		t.Fatalf("got %d %s, want 200 {\"result\":\"Success\"}", r.status, r.body)
	}
}

const lb = "/netlox/v1/config/loadbalancer"

func TestPostRule(t *testing.T) {
	h := newHarness(t, true, nil)
	mustCreate(t, h, ruleBody(t, nil))

	tests := []struct {
		name   string
		ct     string
		body   []byte
		status int
		code   string
		field  string
	}{
		{"identical re-POST", "", ruleBody(t, nil), 409, "rule_exists", ""},
		{"identical re-POST with charset", "application/json; charset=utf-8", ruleBody(t, nil), 409, "rule_exists", ""},
		{"text/plain (CSRF-able)", "text/plain", ruleBody(t, func(sa map[string]any) { sa["port"] = 81 }), 415, "unsupported_media_type", "Content-Type"},
		{"form", "application/x-www-form-urlencoded", ruleBody(t, func(sa map[string]any) { sa["port"] = 81 }), 415, "unsupported_media_type", "Content-Type"},
		{"no content type", "none", ruleBody(t, func(sa map[string]any) { sa["port"] = 81 }), 415, "unsupported_media_type", "Content-Type"},
		{"malformed JSON", "", []byte(`{"serviceArguments":`), 400, "malformed_json", ""},
		{"not an object", "", []byte(`[1,2]`), 400, "malformed_json", ""},
		{"misspelled key", "", []byte(`{"serviceArguments":{"external_ip":"10.0.0.2","port":80,"protocol":"tcp","mode":4},` +
			`"endpoints":[{"endpointIP":"10.1.0.1","targetPort":80,"weight":1}]}`), 400, "unknown_field", "serviceArguments.external_ip"},
		{"one key in two casings", "", []byte(`{"serviceArguments":{"externalIP":"10.0.0.2","ExternalIP":"10.0.0.3","port":80,"protocol":"tcp","mode":4},` +
			`"endpoints":[{"endpointIP":"10.1.0.1","targetPort":80,"weight":1}]}`), 400, "malformed_json", "serviceArguments.externalIP"},
		{"invalid VIP", "", ruleBody(t, func(sa map[string]any) { sa["externalIP"] = "not-an-ip" }), 400, "invalid_field", "serviceArguments.externalIP"},
		{"too large", "", append(append([]byte(`{"serviceArguments":{"name":"`), bytes.Repeat([]byte("x"), 1<<20)...), `"}}`...), 413, "body_too_large", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ct := tc.ct
			switch ct {
			case "":
				ct = "application/json"
			case "none":
				ct = ""
			}
			checkError(t, h.doCT(t, http.MethodPost, lb, ct, tc.body), tc.status, tc.code, tc.field)
		})
	}

	if n := len(h.store.List()); n != 1 {
		t.Errorf("rejected POSTs changed the store: %d rules", n)
	}
	t.Run("update in place", func(t *testing.T) {
		checkSuccess(t, h.do(t, http.MethodPost, lb, ruleBody(t, func(sa map[string]any) { sa["sel"] = 2 })))
		got := h.store.List()
		if len(got) != 1 || got[0].Rule.ServiceArguments.Sel != 2 {
			t.Fatalf("store after update = %+v, want one rule with sel 2", got)
		}
	})
}

// fakeStatus is a datapath status source for decoration tests.
type fakeStatus map[spec.Key]spec.RuleStatus

func (f fakeStatus) Status(k spec.Key) (spec.RuleStatus, bool) {
	st, ok := f[k]
	return st, ok
}

func TestGetRoutes(t *testing.T) {
	key, err := rules.KeyOf(rules.Rule{ServiceArguments: rules.ServiceArguments{ExternalIP: "10.0.0.1", Port: 8080, Protocol: "tcp"}})
	if err != nil {
		t.Fatal(err)
	}
	status := fakeStatus{key: {Ready: false, Reason: "no usable decode endpoint", Endpoints: map[string]spec.EndpointStatus{
		"10.1.0.1:8000": {State: "active", Breaker: "closed"},
		"10.1.0.2:8000": {State: "down", Breaker: "open"},
	}}}
	h := newHarness(t, true, status)
	// Probed: "active" and "down" are what a probe reports (unprobed.go).
	mustCreate(t, h, ruleBody(t, func(sa map[string]any) { sa["probetype"] = "http" }))
	mustCreate(t, h, ruleBody(t, func(sa map[string]any) {
		sa["externalIP"] = "2001:db8::10"
		sa["name"] = "v6"
		sa["projectId"] = "team-a"
	}))

	t.Run("list decorated", func(t *testing.T) {
		r := h.do(t, http.MethodGet, lb+"/all", nil)
		var list rules.RuleList
		if r.status != 200 || json.Unmarshal(r.body, &list) != nil {
			t.Fatalf("GET all: %d %s", r.status, r.body)
		}
		if len(list.LbAttr) != 2 {
			t.Fatalf("lbAttr has %d rules, want 2", len(list.LbAttr))
		}
		var v4 *rules.Rule
		for i := range list.LbAttr {
			if list.LbAttr[i].ServiceArguments.ExternalIP == "10.0.0.1" {
				v4 = &list.LbAttr[i]
			}
		}
		if v4 == nil || v4.Status == nil || v4.Status.Ready || v4.Status.Reason != "no usable decode endpoint" {
			t.Fatalf("v4 rule status = %+v, want not ready with reason", v4)
		}
		states := map[string]string{}
		for _, ep := range v4.Endpoints {
			states[ep.EndpointIP] = ep.State + "/" + ep.Health
		}
		// LoxiLB's words in state, the finer state in health.
		if states["10.1.0.1"] != "active/active" || states["10.1.0.2"] != "inactive/down" {
			t.Errorf("endpoint state/health = %v, want 10.1.0.1 active/active, 10.1.0.2 inactive/down", states)
		}
		// The stored entry must not have been written through.
		for _, e := range h.store.List() {
			for _, ep := range e.Rule.Endpoints {
				if ep.State != "" {
					t.Errorf("stored endpoint mutated by GET: %+v", ep)
				}
			}
		}
	})

	tests := []struct {
		name     string
		path     string
		status   int
		code     string
		contains string
	}{
		{"all by projectId", lb + "/all?projectId=team-a", 200, "", `{"lbAttr":[{"serviceArguments":{"externalIP":"2001:db8::10"`},
		{"all by unknown projectId", lb + "/all?projectId=nobody", 200, "", `{"lbAttr":[]}`},
		{"by key", lb + "/externalipaddress/10.0.0.1/port/8080/protocol/tcp", 200, "", `"externalIP":"10.0.0.1"`},
		{"by key IPv6 bracketed", lb + "/externalipaddress/[2001:db8::10]/port/8080/protocol/tcp", 200, "", `"name":"v6"`},
		{"by key IPv6 bare", lb + "/externalipaddress/2001:db8::10/port/8080/protocol/tcp", 200, "", `"name":"v6"`},
		{"by key miss", lb + "/externalipaddress/10.0.0.9/port/8080/protocol/tcp", 404, "rule_not_found", ""},
		{"by key bad ip", lb + "/externalipaddress/nope/port/8080/protocol/tcp", 400, "invalid_field", ""},
		{"by key bad port", lb + "/externalipaddress/10.0.0.1/port/http/protocol/tcp", 400, "invalid_field", ""},
		{"compiled", lb + "/externalipaddress/10.0.0.1/port/8080/protocol/tcp/compiled", 200, "", `"selector":"rr"`},
		{"compiled shows defaults", lb + "/externalipaddress/10.0.0.1/port/8080/protocol/tcp/compiled", 200, "", `"pd":null`},
		{"compiled miss", lb + "/externalipaddress/10.0.0.9/port/8080/protocol/tcp/compiled", 404, "rule_not_found", ""},
		{"status", lb + "/externalipaddress/10.0.0.1/port/8080/protocol/tcp/status", 200, "",
			`"endpoints":{"10.1.0.1:8000":{"state":"active","breaker":"closed"},"10.1.0.2:8000":{"state":"down","breaker":"open"}}`},
		{"status without runtime", lb + "/externalipaddress/[2001:db8::10]/port/8080/protocol/tcp/status", 200, "",
			`{"ready":false,"reason":"no runtime status available","endpoints":{}}`},
		{"status miss", lb + "/externalipaddress/10.0.0.9/port/8080/protocol/tcp/status", 404, "rule_not_found", ""},
		{"healthz", "/healthz", 200, "", `"ok"`},
		{"readyz", "/readyz", 200, "", `"ready"`},
		{"swagger.json", "/netlox/v1/swagger.json", 200, "", `"swagger":"2.0"`},
		{"docs", "/netlox/v1/docs", 200, "", `swagger-ui-bundle.js`},
		{"docs slash", "/netlox/v1/docs/", 200, "", `swagger-ui-bundle.js`},
		{"docs asset", "/netlox/v1/docs/init.js", 200, "", `/netlox/v1/swagger.json`},
		{"docs asset miss", "/netlox/v1/docs/nope.js", 404, "", ""},
		{"unknown route", "/netlox/v1/config/nope", 404, "route_not_found", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := h.do(t, http.MethodGet, tc.path, nil)
			if tc.code != "" {
				checkError(t, r, tc.status, tc.code, "")
				return
			}
			if r.status != tc.status || !strings.Contains(string(r.body), tc.contains) {
				t.Fatalf("GET %s = %d %s, want %d containing %s", tc.path, r.status, r.body, tc.status, tc.contains)
			}
		})
	}
}

func TestCompiledViewKeys(t *testing.T) {
	h := newHarness(t, true, nil)
	mustCreate(t, h, ruleBody(t, nil))
	r := h.do(t, http.MethodGet, lb+"/externalipaddress/10.0.0.1/port/8080/protocol/tcp/compiled", nil)
	var v map[string]any
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"key", "name", "generation", "selector", "selector_id", "session", "probe", "sse",
		"max_stream_duration_sec", "idle_timeout_sec", "circuit_breaker", "engine", "pd", "kv", "chwbl", "endpoints"} {
		if _, ok := v[k]; !ok {
			t.Errorf("compiled view lacks %q: %s", k, r.body)
		}
	}
	eps, _ := v["endpoints"].([]any)
	if len(eps) != 2 {
		t.Fatalf("compiled endpoints = %v, want 2", v["endpoints"])
	}
	ep0, _ := eps[0].(map[string]any)
	if ep0["id"] != "10.1.0.1:8000" || ep0["role"] != "any" || ep0["nixl_port"] != float64(8000) {
		t.Errorf("compiled endpoint 0 = %v, want id 10.1.0.1:8000, role any, nixl_port defaulted to 8000", ep0)
	}
}

func TestDeleteRoutes(t *testing.T) {
	hostRule := func(sa map[string]any) { sa["host"] = "api.example.com" }
	pathRule := func(sa map[string]any) {
		sa["path_prefix"] = "/v1"
		sa["path_match_mode"] = "prefix"
		sa["model_name"] = "llama"
		sa["block"] = 7
	}
	tests := []struct {
		name   string
		create func(sa map[string]any) // nil: the plain rule
		path   string
		status int
		code   string
	}{
		{"by key", nil, lb + "/externalipaddress/10.0.0.1/port/8080/protocol/tcp", 200, ""},
		{"by key disabled mode", nil, lb + "/externalipaddress/10.0.0.1/port/8080/protocol/tcp?path_match_mode=disabled&bgp=true", 200, ""},
		{"by key IPv6", func(sa map[string]any) { sa["externalIP"] = "2001:db8::10" }, lb + "/externalipaddress/[2001:db8::10]/port/8080/protocol/tcp", 200, ""},
		{"by key full query", pathRule, lb + "/externalipaddress/10.0.0.1/port/8080/protocol/tcp?block=7&path_prefix=/v1&path_match_mode=prefix&model_name=llama", 200, ""},
		{"by key partial query misses", pathRule, lb + "/externalipaddress/10.0.0.1/port/8080/protocol/tcp?path_prefix=/v1&path_match_mode=prefix", 404, "rule_not_found"},
		{"by key range", nil, lb + "/externalipaddress/10.0.0.1/port/8080/portmax/8080/protocol/tcp", 200, ""},
		{"host", hostRule, lb + "/hosturl/api.example.com/externalipaddress/10.0.0.1/port/8080/protocol/tcp", 200, ""},
		{"host any", nil, lb + "/hosturl/any/externalipaddress/10.0.0.1/port/8080/protocol/tcp", 200, ""},
		{"host wrong", hostRule, lb + "/hosturl/other.example.com/externalipaddress/10.0.0.1/port/8080/protocol/tcp", 404, "rule_not_found"},
		{"host range", hostRule, lb + "/hosturl/api.example.com/externalipaddress/10.0.0.1/port/8080/portmax/8080/protocol/tcp", 200, ""},
		{"bad block", nil, lb + "/externalipaddress/10.0.0.1/port/8080/protocol/tcp?block=-1", 400, "invalid_field"},
		{"bad portmax", nil, lb + "/externalipaddress/10.0.0.1/port/8080/portmax/x/protocol/tcp", 400, "invalid_field"},
		{"miss", nil, lb + "/externalipaddress/10.0.0.2/port/8080/protocol/tcp", 404, "rule_not_found"},
		{"by name", nil, lb + "/name/r1", 200, ""},
		{"by name none matched", nil, lb + "/name/nobody", 404, "rule_not_found"},
		{"all", nil, lb + "/all", 200, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, true, nil)
			mustCreate(t, h, ruleBody(t, tc.create))
			r := h.do(t, http.MethodDelete, tc.path, nil)
			if tc.code != "" {
				checkError(t, r, tc.status, tc.code, "")
				if n := len(h.store.List()); n != 1 {
					t.Errorf("failed delete changed the store: %d rules", n)
				}
				return
			}
			checkSuccess(t, r)
			if tc.name == "by name none matched" {
				if n := len(h.store.List()); n != 1 {
					t.Errorf("store has %d rules, want 1", n)
				}
				return
			}
			if n := len(h.store.List()); n != 0 {
				t.Errorf("store has %d rules after delete, want 0", n)
			}
		})
	}
}

func TestMethodNotAllowed(t *testing.T) {
	h := newHarness(t, true, nil)
	for _, tc := range []struct{ method, path string }{
		{http.MethodPut, lb},
		{http.MethodGet, lb},
		{http.MethodPost, lb + "/all"},
		{http.MethodPatch, lb + "/externalipaddress/10.0.0.1/port/8080/protocol/tcp"},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			r := h.do(t, tc.method, tc.path, nil)
			checkError(t, r, 405, "method_not_allowed", "")
			if r.header.Get("Allow") == "" {
				t.Error("405 without an Allow header")
			}
		})
	}
}

// TestBootGate: until replay finishes, writes are 503 + Retry-After, reads
// and liveness answer, readiness does not.
func TestBootGate(t *testing.T) {
	h := newHarness(t, false, nil)
	for _, tc := range []struct{ method, path string }{
		{http.MethodPost, lb},
		{http.MethodDelete, lb + "/all"},
		{http.MethodDelete, lb + "/name/r1"},
		{http.MethodDelete, lb + "/externalipaddress/10.0.0.1/port/8080/protocol/tcp"},
		{http.MethodDelete, lb + "/hosturl/any/externalipaddress/10.0.0.1/port/8080/portmax/8080/protocol/tcp"},
		{http.MethodGet, "/readyz"},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			r := h.do(t, tc.method, tc.path, ruleBody(t, nil))
			checkError(t, r, 503, "not_ready", "")
			if got := r.header.Get("Retry-After"); got != "5" {
				t.Errorf("Retry-After = %q, want 5", got)
			}
		})
	}
	for _, p := range []string{"/healthz", lb + "/all", "/metrics"} {
		if r := h.do(t, http.MethodGet, p, nil); r.status != 200 {
			t.Errorf("GET %s during boot = %d, want 200", p, r.status)
		}
	}
	if err := h.store.Replay(context.Background()); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, h, ruleBody(t, nil))
}

// faultStore injects failures the real store cannot produce on demand.
type faultStore struct {
	api.RuleStore
	applyErr error
}

func (f faultStore) Ready() bool { return true }

func (f faultStore) List() []store.Entry { panic("boom") }

func (f faultStore) Apply(rules.Rule) (store.Outcome, *spec.Rule, error) {
	return store.Created, nil, f.applyErr
}

func TestFaults(t *testing.T) {
	h := serve(t, faultStore{applyErr: io.ErrUnexpectedEOF}, nil)

	t.Run("panic is JSON 500 and counted", func(t *testing.T) {
		checkError(t, h.do(t, http.MethodGet, lb+"/all", nil), 500, "internal", "")
		if got := counterValue(t, h.metrics.API.Panics); got != 1 {
			t.Errorf("panics counter = %v, want 1", got)
		}
	})
	t.Run("untyped store error is 500 internal without the cause", func(t *testing.T) {
		r := h.do(t, http.MethodPost, lb, ruleBody(t, nil))
		checkError(t, r, 500, "internal", "")
		if strings.Contains(string(r.body), io.ErrUnexpectedEOF.Error()) {
			t.Errorf("internal cause leaked to client: %s", r.body)
		}
	})
}

func TestMetricsByRouteTemplate(t *testing.T) {
	h := newHarness(t, true, nil)
	mustCreate(t, h, ruleBody(t, nil))
	h.do(t, http.MethodGet, lb+"/externalipaddress/10.0.0.1/port/8080/protocol/tcp", nil)
	h.do(t, http.MethodGet, lb+"/externalipaddress/10.0.0.2/port/8080/protocol/tcp", nil)
	h.do(t, http.MethodGet, "/no/such/path", nil)

	tmpl := "/netlox/v1/config/loadbalancer/externalipaddress/:ip/port/:port/protocol/:proto"
	tests := []struct {
		method, route, code string
		want                float64
	}{
		{"POST", "/netlox/v1/config/loadbalancer", "200", 1},
		{"GET", tmpl, "200", 1},
		{"GET", tmpl, "404", 1},
		{"GET", "unmatched", "404", 1},
	}
	for _, tc := range tests {
		if got := counterValue(t, h.metrics.API.Requests.WithLabelValues(tc.method, tc.route, tc.code)); got != tc.want {
			t.Errorf("requests{%s,%s,%s} = %v, want %v", tc.method, tc.route, tc.code, got, tc.want)
		}
	}
	for _, p := range []string{"/metrics", "/netlox/v1/metrics"} {
		r := h.do(t, http.MethodGet, p, nil)
		if r.status != 200 || !strings.Contains(string(r.body), `infergate_api_requests_total{code="200",method="POST",route="/netlox/v1/config/loadbalancer"} 1`) {
			t.Errorf("GET %s = %d, missing request counter:\n%s", p, r.status, r.body)
		}
	}
}

// counterValue reads a counter (testutil would need an extra module).
func counterValue(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestReadyzWaitsForBoot: after replay the store takes writes, but /readyz
// stays 503 until the daemon says boot (rule files) is done.
func TestReadyzWaitsForBoot(t *testing.T) {
	rs, err := store.Open(store.Options{StateDir: t.TempDir(), Log: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Replay(context.Background()); err != nil {
		t.Fatal(err)
	}
	var done atomic.Bool
	h := serveWith(t, rs, nil, done.Load)
	checkError(t, h.do(t, http.MethodGet, "/readyz", nil), 503, "not_ready", "")
	mustCreate(t, h, ruleBody(t, nil))
	done.Store(true)
	if r := h.do(t, http.MethodGet, "/readyz", nil); r.status != 200 {
		t.Fatalf("readyz after boot = %d %s", r.status, r.body)
	}
}

// TestConcurrentClients runs writers and readers in parallel (run with
// -race). Bounded: 6 writers × 15 rules, 2 readers × 30 lists.
func TestConcurrentClients(t *testing.T) {
	h := newHarness(t, true, fakeStatus{})
	const writers, perWriter, readers, reads = 6, 15, 2, 30
	var wg sync.WaitGroup
	errs := make(chan string, writers*perWriter*2+readers*reads)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < perWriter; i++ {
				port := 10000 + w*100 + i
				body := ruleBody(t, func(sa map[string]any) { sa["port"] = port; sa["name"] = "w" + strconv.Itoa(w) })
				if r := h.do(t, http.MethodPost, lb, body); r.status != 200 {
					errs <- "create: " + string(r.body)
				}
				if i%3 == 0 {
					if r := h.do(t, http.MethodDelete, lb+"/externalipaddress/10.0.0.1/port/"+strconv.Itoa(port)+"/protocol/tcp", nil); r.status != 200 {
						errs <- "delete: " + string(r.body)
					}
				}
			}
		}(w)
	}
	for g := 0; g < readers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < reads; i++ {
				if r := h.do(t, http.MethodGet, lb+"/all", nil); r.status != 200 {
					errs <- "list: " + string(r.body)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if got, want := len(h.store.List()), writers*(perWriter-(perWriter+2)/3); got != want {
		t.Errorf("store has %d rules, want %d", got, want)
	}
}
