package cli_test

import (
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
	"github.com/infergate/infergate/cli"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/rules/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
)

const (
	cliRW = "cli-rw-0123456789abcdef0123456789"
	cliRO = "cli-ro-0123456789abcdef0123456789"
)

// guardedAPI is the real management API behind a token file, on loopback.
func guardedAPI(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("rw:"+cliRW+"\nro:"+cliRO+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	rs, err := store.Open(store.Options{StateDir: filepath.Join(dir, "state"), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Replay(context.Background()); err != nil {
		t.Fatal(err)
	}
	g, err := auth.NewGuard("127.0.0.1:0", auth.Options{TokenFile: tokens})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	o := api.DefaultOptions()
	o.Store, o.Log, o.Guard = rs, log, g
	o.Metrics = &metrics.Metrics{Registry: reg, API: metrics.NewAPI(reg)}
	srv, err := api.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return ts.URL
}

func TestTokenSources(t *testing.T) {
	url := guardedAPI(t)
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rwFile := write("rw", "# mine\nrw:"+cliRW+"\n")
	roFile := write("ro", cliRO+"\n")
	badFile := write("two", cliRW+"\n"+cliRO+"\n")
	envOf := func(kv map[string]string) cli.Env {
		return cli.Env{Getenv: func(k string) string { return kv[k] }}
	}
	rule := "create lb 127.0.0.1 --tcp=8080:8000 --endpoints=127.0.0.1:1 --name=t"
	cases := []struct {
		name     string
		env      map[string]string
		args     string
		code     int
		contains []string
	}{
		{"no token", nil, "get lb", cli.ExitFailed, []string{"unauthorized", "hint:", "--token-file"}},
		{"wrong --token", nil, "get lb --token wrong-token-0123456789abcdef", cli.ExitFailed, []string{"unauthorized", "rotated out"}},
		{"ro --token-file reads", nil, "get lb --token-file " + roFile, cli.ExitOK, nil},
		{"ro token cannot create", nil, rule + " --token-file " + roFile, cli.ExitFailed, []string{"token_read_only", "read-write token (rw:)"}},
		{"rw INFERGATE_TOKEN creates", map[string]string{"INFERGATE_TOKEN": cliRW}, rule, cli.ExitOK, []string{"created"}},
		{"INFERGATE_TOKEN_FILE", map[string]string{"INFERGATE_TOKEN_FILE": rwFile}, "get lb", cli.ExitOK, []string{"127.0.0.1"}},
		{"flag beats env", map[string]string{"INFERGATE_TOKEN": cliRO}, "delete lb --name=t --token-file " + rwFile, cli.ExitOK, nil},
		{"file with two tokens", nil, "get lb --token-file " + badFile, cli.ExitUsage, []string{"holds 2 tokens"}},
		{"missing file", nil, "get lb --token-file " + filepath.Join(dir, "nope"), cli.ExitUsage, []string{"--token-file"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := envOf(tc.env)
			args := append(strings.Fields(tc.args), "--server", url)
			res := runEnv(t, env, args...)
			if res.code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout %s\nstderr %s", res.code, tc.code, res.stdout, res.stderr)
			}
			for _, want := range tc.contains {
				if !strings.Contains(res.stdout+res.stderr, want) {
					t.Errorf("output lacks %q:\nstdout %s\nstderr %s", want, res.stdout, res.stderr)
				}
			}
			for _, secret := range []string{cliRW, cliRO} {
				if strings.Contains(res.stdout+res.stderr, secret) {
					t.Errorf("output echoes a token")
				}
			}
		})
	}
}

// TestForeignHostHint: a gateway refusing the --server host name (403
// host_not_allowed, as a real Guard answers a foreign Host) gets a hint
// naming the fix. A name that resolves to loopback but is not allowed
// cannot be made in a test, so a server replays the Guard's answer.
func TestForeignHostHint(t *testing.T) {
	g, err := auth.NewGuard("127.0.0.1:11111", auth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := g.Check("gw.example:11111", "", auth.AccessRead)
	if d == nil {
		t.Fatal("foreign host allowed")
	}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(d.Err.Status)
		_ = json.NewEncoder(w).Encode(map[string]any{"code": d.Err.Status, "message": d.Err.Message,
			"result": d.Err.Result, "error_code": d.Err.Code})
	}))
	t.Cleanup(ts.Close)
	res := runEnv(t, cli.Env{}, "get", "lb", "--server", ts.URL)
	if res.code != cli.ExitFailed || !strings.Contains(res.stderr, "host_not_allowed") ||
		!strings.Contains(res.stderr, "--api-allowed-host") {
		t.Fatalf("exit %d stderr %s", res.code, res.stderr)
	}
}
