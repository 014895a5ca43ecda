package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/infergate/infergate/api"
	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/rules"
	"github.com/infergate/infergate/rules/store"
	"github.com/infergate/infergate/spec"
)

// recordingExplainer records what the handler passed on and answers with a
// typed view, as the datapath does (through api.ExplainerOf).
type recordingExplainer struct {
	key    spec.Key
	path   string
	header http.Header
	body   string
	err    error
}

type fakeExplanation struct {
	Rule    string `json:"rule"`
	Prefill string `json:"prefill"`
}

func (r *recordingExplainer) Explain(_ context.Context, k spec.Key, path string, h http.Header, body []byte) (fakeExplanation, error) {
	r.key, r.path, r.header, r.body = k, path, h, string(body)
	return fakeExplanation{Rule: k.String(), Prefill: "10.0.0.2:8000"}, r.err
}

func TestExplainRoute(t *testing.T) {
	const route = api.BasePath + "/config/loadbalancer/externalipaddress/10.0.0.1/port/8080/protocol/tcp/explain"
	tests := []struct {
		name       string
		noExplain  bool
		url        string
		ct         string
		body       string
		explainErr error
		wantStatus int
		wantCode   string // error_code, or "" on 200
		wantPath   string
		wantHeader [2]string
		wantBody   string
		wantKey    string
	}{
		{name: "envelope", url: route, body: `{"path":"/v1/completions","headers":{"X-Conversation-Id":"c1"},"body":{"prompt":"hi"}}`,
			wantStatus: 200, wantPath: "/v1/completions", wantHeader: [2]string{"X-Conversation-Id", "c1"}, wantBody: `{"prompt":"hi"}`,
			wantKey: "10.0.0.1:8080|tcp"},
		{name: "bare client body defaults to chat", url: route, body: `{"model":"m","messages":[{"role":"user","content":"x"}]}`,
			wantStatus: 200, wantPath: "/v1/chat/completions", wantBody: `{"model":"m","messages":[{"role":"user","content":"x"}]}`,
			wantKey: "10.0.0.1:8080|tcp"},
		{name: "key query picks the rule", url: route + "?model_name=llama", body: `{"body":{"prompt":"x"}}`,
			wantStatus: 200, wantPath: "/v1/chat/completions", wantBody: `{"prompt":"x"}`, wantKey: "10.0.0.1:8080|tcp|model=llama"},
		{name: "no rule", url: strings.Replace(route, "8080", "9090", 1), body: `{}`, wantStatus: 404, wantCode: "rule_not_found"},
		{name: "bad ip", url: strings.Replace(route, "10.0.0.1", "nope", 1), body: `{}`, wantStatus: 400, wantCode: "invalid_field"},
		{name: "no explainer", noExplain: true, url: route, body: `{}`, wantStatus: 501, wantCode: api.CodeNotAvailable},
		{name: "not json content type", url: route, ct: "text/plain", body: `{}`, wantStatus: 415, wantCode: "unsupported_media_type"},
		{name: "not an object", url: route, body: `[1]`, wantStatus: 400, wantCode: apierror.CodeMalformedJSON},
		{name: "null body", url: route, body: `{"body":null}`, wantStatus: 400, wantCode: apierror.CodeInvalidField},
		{name: "relative path", url: route, body: `{"path":"v1/x","body":{}}`, wantStatus: 400, wantCode: apierror.CodeInvalidField},
		{name: "headers not strings", url: route, body: `{"headers":{"a":1},"body":{}}`, wantStatus: 400, wantCode: apierror.CodeMalformedJSON},
		{name: "datapath error passes through", url: route, body: `{"body":{}}`,
			explainErr: apierror.New(http.StatusServiceUnavailable, "rule_not_served", "", "not served", "rule is not served yet"),
			wantStatus: 503, wantCode: "rule_not_served"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := store.Open(store.Options{StateDir: t.TempDir(), Log: quietLog()})
			if err != nil {
				t.Fatal(err)
			}
			if err := rs.Replay(context.Background()); err != nil {
				t.Fatal(err)
			}
			var r rules.Rule
			if err := json.Unmarshal(ruleBody(t, nil), &r); err != nil {
				t.Fatal(err)
			}
			if _, _, err := rs.Apply(r); err != nil {
				t.Fatal(err)
			}
			rec := &recordingExplainer{err: tc.explainErr}
			reg := prometheus.NewRegistry()
			opts := api.DefaultOptions()
			opts.Store, opts.Log = rs, quietLog()
			opts.Metrics = &metrics.Metrics{Registry: reg, API: metrics.NewAPI(reg)}
			if !tc.noExplain {
				opts.Explain = api.ExplainerOf(rec.Explain)
			}
			srv, err := api.NewServer(opts)
			if err != nil {
				t.Fatal(err)
			}
			ts := httptest.NewServer(srv.Handler())
			defer ts.Close()
			req, _ := http.NewRequest(http.MethodPost, ts.URL+tc.url, strings.NewReader(tc.body))
			ct := tc.ct
			if ct == "" {
				ct = "application/json"
			}
			req.Header.Set("Content-Type", ct)
			resp, err := ts.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var got map[string]any
			if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d: %v", resp.StatusCode, tc.wantStatus, got)
			}
			if tc.wantCode != "" {
				if got["error_code"] != tc.wantCode {
					t.Fatalf("error_code %v, want %s (%v)", got["error_code"], tc.wantCode, got)
				}
				return
			}
			if got["prefill"] != "10.0.0.2:8000" || got["rule"] != tc.wantKey {
				t.Fatalf("answer %v, want the explainer's view for %s", got, tc.wantKey)
			}
			if rec.path != tc.wantPath || rec.body != tc.wantBody || rec.key.String() != tc.wantKey {
				t.Fatalf("explainer got path %q body %q key %s", rec.path, rec.body, rec.key)
			}
			if h := tc.wantHeader; h[0] != "" && rec.header.Get(h[0]) != h[1] {
				t.Fatalf("header %s = %q, want %q", h[0], rec.header.Get(h[0]), h[1])
			}
		})
	}
}
