package cli_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/infergate/infergate/cli"
)

// explainServer answers POST …/explain with answer and records the
// request.
type explainServer struct {
	*httptest.Server
	mu       sync.Mutex
	url      string
	envelope map[string]json.RawMessage
}

const sampleExplanation = `{"rule":"10.0.0.1:8080|tcp","prefill":"10.0.0.2:8000","decode":"10.0.0.3:8000",
"steps":[{"tier":"tier0_session","hit":false,"reason":"no_key"},{"tier":"tier1_prefix","hit":true,"choice":"10.0.0.2:8000"}],
"prefix":{"hit":true,"endpoint":"10.0.0.2:8000","matched_bytes":4096,"key_bytes":4100,"match_rate":0.999},
"candidates":[{"id":"10.0.0.2:8000","load":1},{"id":"10.0.0.4:8000","load":0}],"notes":["a","b"]}`

func newExplainServer(t *testing.T, status int, answer string) *explainServer {
	s := &explainServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.url = r.URL.String()
		_ = json.Unmarshal(b, &s.envelope)
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, answer)
	}))
	t.Cleanup(s.Close)
	return s
}

func TestExplainCommand(t *testing.T) {
	dir := t.TempDir()
	bodyFile := filepath.Join(dir, "body.json")
	if err := os.WriteFile(bodyFile, []byte(`{"model":"m","prompt":"hello"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	badFile := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(badFile, []byte(`{"model":`), 0o600); err != nil {
		t.Fatal(err)
	}
	const route = "/netlox/v1/config/loadbalancer/externalipaddress/10.0.0.1/port/8080/protocol/tcp/explain"
	tests := []struct {
		name     string
		status   int
		answer   string
		args     []string
		wantCode int
		wantURL  string
		wantEnv  map[string]string // envelope member → exact JSON
		wantOut  []string          // substrings of stdout (or stderr on failure)
	}{
		{name: "prompt builds a chat body; table", status: 200, answer: sampleExplanation,
			args:     []string{"explain", "10.0.0.1", "--tcp=8080", "--prompt", "hi", "--model", "m", "--header", "X-Conversation-Id=c1"},
			wantCode: cli.ExitOK, wantURL: route,
			wantEnv: map[string]string{"path": `"/v1/chat/completions"`, "headers": `{"X-Conversation-Id":"c1"}`,
				"body": `{"messages":[{"content":"hi","role":"user"}],"model":"m"}`},
			wantOut: []string{"rule:", "10.0.0.1:8080|tcp", "TIER", "REASON", "tier1_prefix", "no_key", "match_rate:", "0.999",
				"ID", "LOAD", "notes: [a, b]"}},
		{name: "file body, completion path, rule by model", status: 200, answer: sampleExplanation,
			args:     []string{"explain", "10.0.0.1", "--tcp=8080", "-f", bodyFile, "--path", "/v1/completions", "--model-name", "llama"},
			wantCode: cli.ExitOK, wantURL: route + "?model_name=llama",
			wantEnv: map[string]string{"path": `"/v1/completions"`, "body": `{"model":"m","prompt":"hello"}`}},
		{name: "prompt on completion path", status: 200, answer: `{"a":1}`,
			args:     []string{"explain", "10.0.0.1", "--tcp=8080", "--prompt", "x", "--path", "/v1/completions"},
			wantCode: cli.ExitOK, wantEnv: map[string]string{"body": `{"prompt":"x"}`}, wantOut: []string{"a:  1"}},
		{name: "json output is the server's answer", status: 200, answer: `{"rule":"r","steps":[]}`,
			args:     []string{"-o", "json", "explain", "10.0.0.1", "--tcp=8080", "--prompt", "x"},
			wantCode: cli.ExitOK, wantOut: []string{"{\n  \"rule\": \"r\",\n  \"steps\": []\n}"}},
		{name: "server error keeps the envelope", status: 404,
			answer:   `{"code":404,"message":"no rule on 10.0.0.1:8080/tcp","result":"no-rule error","error_code":"rule_not_found"}`,
			args:     []string{"explain", "10.0.0.1", "--tcp=8080", "--prompt", "x"},
			wantCode: cli.ExitFailed, wantOut: []string{"HTTP 404 rule_not_found", "error_code: rule_not_found"}},
		{name: "no port", args: []string{"explain", "10.0.0.1", "--prompt", "x"}, wantCode: cli.ExitUsage},
		{name: "neither body nor prompt", args: []string{"explain", "10.0.0.1", "--tcp=8080"}, wantCode: cli.ExitUsage},
		{name: "both body and prompt", args: []string{"explain", "10.0.0.1", "--tcp=8080", "--prompt", "x", "-f", bodyFile}, wantCode: cli.ExitUsage},
		{name: "bad header", args: []string{"explain", "10.0.0.1", "--tcp=8080", "--prompt", "x", "--header", "nope"}, wantCode: cli.ExitUsage},
		{name: "yaml output not offered", args: []string{"-o", "yaml", "explain", "10.0.0.1", "--tcp=8080", "--prompt", "x"}, wantCode: cli.ExitUsage},
		{name: "invalid body file", args: []string{"explain", "10.0.0.1", "--tcp=8080", "-f", badFile}, wantCode: cli.ExitFailed,
			wantOut: []string{"not valid JSON"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := newExplainServer(t, tc.status, tc.answer)
			res := runEnv(t, cli.Env{Getenv: func(k string) string {
				if k == "INFERGATE_SERVER" {
					return srv.URL
				}
				return ""
			}}, tc.args...)
			if res.code != tc.wantCode {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", res.code, tc.wantCode, res.stdout, res.stderr)
			}
			srv.mu.Lock()
			defer srv.mu.Unlock()
			if tc.wantURL != "" && srv.url != tc.wantURL {
				t.Errorf("URL %s, want %s", srv.url, tc.wantURL)
			}
			for k, want := range tc.wantEnv {
				if got := string(srv.envelope[k]); got != want {
					t.Errorf("envelope %s = %s, want %s", k, got, want)
				}
			}
			text := res.stdout + res.stderr
			for _, want := range tc.wantOut {
				if !strings.Contains(text, want) {
					t.Errorf("output lacks %q:\n%s", want, text)
				}
			}
		})
	}
}
