package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/infergate/infergate/api"
	"github.com/infergate/infergate/api/auth"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/rules"
	"github.com/infergate/infergate/rules/store"
	"github.com/prometheus/client_golang/prometheus"
)

const (
	testRW = "rw-token-0123456789abcdef0123456789"
	testRO = "ro-token-0123456789abcdef0123456789"
)

// guardedServer serves a replayed store behind a guard built from opts for
// an API listening on 127.0.0.1:11111 (the daemon's default).
func guardedServer(t *testing.T, opts auth.Options) (*httptest.Server, *metrics.Metrics) {
	t.Helper()
	rs, err := store.Open(store.Options{StateDir: t.TempDir(), Log: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Replay(context.Background()); err != nil {
		t.Fatal(err)
	}
	g, err := auth.NewGuard("127.0.0.1:11111", opts)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m := &metrics.Metrics{Registry: reg, API: metrics.NewAPI(reg)}
	o := api.DefaultOptions()
	o.Store, o.Metrics, o.Log, o.Guard = rs, m, quietLog(), g
	srv, err := api.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return ts, m
}

func tokenFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(p, []byte("rw:"+testRW+"\nro:"+testRO+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func send(t *testing.T, ts *httptest.Server, method, path, host, token string, body []byte) response {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, ts.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// TestAccessControl drives every route class without, with a wrong, with a
// read-only and with a read-write token, and with a foreign Host.
func TestAccessControl(t *testing.T) {
	ts, m := guardedServer(t, auth.Options{TokenFile: tokenFile(t)})
	key := lb + "/externalipaddress/10.0.0.1/port/8080/protocol/tcp"
	explain := key + "/explain"
	const wrong = "wrong-token-0123456789abcdef0123"
	const foreign = "attacker.example:11111"
	cases := []struct {
		name, method, path, host, token string
		body                            []byte
		status                          int
		code                            string
	}{
		{"healthz open", "GET", "/healthz", foreign, "", nil, 200, ""},
		{"readyz open", "GET", "/readyz", foreign, "", nil, 200, ""},
		{"docs open", "GET", "/netlox/v1/docs/", "", "", nil, 200, ""},
		{"swagger.json open", "GET", "/netlox/v1/swagger.json", "", "", nil, 200, ""},
		{"docs foreign host", "GET", "/netlox/v1/docs/", foreign, "", nil, 403, auth.CodeHostNotAllowed},
		{"metrics needs a token", "GET", "/metrics", "", "", nil, 401, auth.CodeUnauthorized},
		{"metrics with ro", "GET", "/metrics", "", testRO, nil, 200, ""},
		{"create without token", "POST", lb, "", "", ruleBody(t, nil), 401, auth.CodeUnauthorized},
		{"create with wrong token", "POST", lb, "", wrong, ruleBody(t, nil), 401, auth.CodeUnauthorized},
		{"create with ro", "POST", lb, "", testRO, ruleBody(t, nil), 403, auth.CodeReadOnlyToken},
		{"create with rw, foreign host", "POST", lb, foreign, testRW, ruleBody(t, nil), 403, auth.CodeHostNotAllowed},
		{"create with rw", "POST", lb, "", testRW, ruleBody(t, nil), 200, ""},
		{"list without token", "GET", lb + "/all", "", "", nil, 401, auth.CodeUnauthorized},
		{"list with wrong token", "GET", lb + "/all", "", wrong, nil, 401, auth.CodeUnauthorized},
		{"list with ro", "GET", lb + "/all", "", testRO, nil, 200, ""},
		{"get with ro", "GET", key, "localhost:11111", testRO, nil, 200, ""},
		{"explain with ro", "POST", explain, "", testRO, []byte(`{"request":{"path":"/v1/completions","body":{"prompt":"x"}}}`), 0, ""},
		{"delete with ro", "DELETE", key, "", testRO, nil, 403, auth.CodeReadOnlyToken},
		{"delete all without token", "DELETE", lb + "/all", "", "", nil, 401, auth.CodeUnauthorized},
		{"unknown route without token", "GET", "/netlox/v1/nope", "", "", nil, 401, auth.CodeUnauthorized},
		{"delete with rw", "DELETE", key, "", testRW, nil, 200, ""},
	}
	for _, tc := range cases {
		r := send(t, ts, tc.method, tc.path, tc.host, tc.token, tc.body)
		switch {
		case tc.status == 0: // explain: any answer but an access refusal
			if r.status == 401 || r.status == 403 {
				t.Errorf("%s: refused %d %s", tc.name, r.status, r.body)
			}
		case tc.code == "":
			if r.status != tc.status {
				t.Errorf("%s: status %d, want %d (%s)", tc.name, r.status, tc.status, r.body)
			}
		default:
			t.Run(tc.name, func(t *testing.T) { checkError(t, r, tc.status, tc.code, "") })
			if tc.status == 401 && !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer ") {
				t.Errorf("%s: 401 without WWW-Authenticate: Bearer", tc.name)
			}
		}
	}
	for reason, want := range map[string]float64{
		auth.ReasonMissingToken: 5, auth.ReasonInvalidToken: 2, auth.ReasonReadOnly: 2, auth.ReasonHostNotAllowed: 2,
	} {
		if got := counterValue(t, m.API.AuthDenied.WithLabelValues(reason)); got != want {
			t.Errorf("auth_denied{reason=%s} = %v, want %v", reason, got, want)
		}
	}
}

// TestRefusedBeforeBody: a refused write is answered without reading its
// body (no 413 for an oversized body, no decode).
func TestRefusedBeforeBody(t *testing.T) {
	ts, _ := guardedServer(t, auth.Options{TokenFile: tokenFile(t)})
	big := bytes.Repeat([]byte("x"), int(api.DefaultMaxBodyBytes)+10)
	r := send(t, ts, "POST", lb, "", "", big)
	checkError(t, r, 401, auth.CodeUnauthorized, "")
}

// TestNoTokenFileStillChecksHost: the default (loopback, no tokens) serves
// writes without a credential but still refuses a rebinding Host.
func TestNoTokenFileStillChecksHost(t *testing.T) {
	ts, _ := guardedServer(t, auth.Options{})
	checkSuccess(t, send(t, ts, "POST", lb, "", "", ruleBody(t, nil)))
	checkError(t, send(t, ts, "DELETE", lb+"/all", "attacker.example", "", nil), 403, auth.CodeHostNotAllowed, "")
	r := send(t, ts, "GET", lb+"/all", "", "", nil)
	var list rules.RuleList
	if err := json.Unmarshal(r.body, &list); err != nil || len(list.LbAttr) != 1 {
		t.Fatalf("the foreign-Host delete changed the rules: %d %s", r.status, r.body)
	}
}

func TestOpenMetricsOption(t *testing.T) {
	ts, _ := guardedServer(t, auth.Options{TokenFile: tokenFile(t), OpenMetrics: true})
	for _, p := range []string{"/metrics", "/netlox/v1/metrics"} {
		if r := send(t, ts, "GET", p, "", "", nil); r.status != 200 {
			t.Errorf("GET %s without token with OpenMetrics: %d", p, r.status)
		}
	}
	checkError(t, send(t, ts, "GET", lb+"/all", "", "", nil), 401, auth.CodeUnauthorized, "")
}
