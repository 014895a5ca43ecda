package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/cli"
	"github.com/infergate/infergate/daemon"
	"github.com/infergate/infergate/optconf"
	"github.com/sirupsen/logrus"
)

// serveWith runs `serve args` with env and returns the options the daemon
// would have started with (Serve returns at once).
func serveWith(t *testing.T, env map[string]string, args ...string) (daemon.Options, *logrus.Logger, result) {
	t.Helper()
	var got daemon.Options
	var gotLog *logrus.Logger
	res := runEnv(t, cli.Env{
		Getenv: func(k string) string { return env[k] },
		Serve: func(_ context.Context, o daemon.Options, log *logrus.Logger) error {
			got, gotLog = o, log
			return nil
		},
	}, append([]string{"serve"}, args...)...)
	return got, gotLog, res
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "infergate.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestServeConfigPrecedence: flag > INFERGATE_* env > --config file >
// default, on knobs of each kind: duration, int, bool, string, a field of
// a nested option struct, a list and a map.
func TestServeConfigPrecedence(t *testing.T) {
	file := writeConfig(t, `
prefill-timeout: 30s
max-client-conns: 100
api-open-metrics: true
api-addr: 127.0.0.1:2001
etcd-ca: /file/ca.pem
api-allowed-host: [file.example]
kv-tokenizer: {m: /file/tok}
log-format: json
`)
	def := daemon.DefaultOptions()
	type knobs struct {
		prefill time.Duration
		conns   int
		open    bool
		addr    string
		etcdCA  string
		hosts   string
		tok     string
		logJSON bool
	}
	get := func(o daemon.Options) knobs {
		return knobs{o.PrefillTimeout, o.Admission.MaxConns, o.Auth.OpenMetrics, o.APIAddr, o.Etcd.TLS.CAFile,
			strings.Join(o.Auth.AllowedHosts, ","), o.KV.Tokenizers["m"], o.LogFormat == "json"}
	}
	env := map[string]string{
		"INFERGATE_PREFILL_TIMEOUT":  "1m",
		"INFERGATE_MAX_CLIENT_CONNS": "200",
		"INFERGATE_API_OPEN_METRICS": "false",
		"INFERGATE_API_ADDR":         "127.0.0.1:2002",
		"INFERGATE_ETCD_CA":          "/env/ca.pem",
		"INFERGATE_API_ALLOWED_HOST": "env1.example,env2.example",
		"INFERGATE_KV_TOKENIZER":     "m=/env/tok",
		"INFERGATE_LOG_FORMAT":       "text",
	}
	flags := []string{"--prefill-timeout=2m", "--max-client-conns=300", "--api-open-metrics=true", "--api-addr=127.0.0.1:2003",
		"--etcd-ca=/flag/ca.pem", "--api-allowed-host=flag.example", "--kv-tokenizer=m=/flag/tok", "--log-format=json"}
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want knobs
	}{
		{"defaults", nil, nil, get(def)},
		{"file", nil, []string{"--config", file}, knobs{30 * time.Second, 100, true, "127.0.0.1:2001", "/file/ca.pem", "file.example", "/file/tok", true}},
		{"file named by INFERGATE_CONFIG", map[string]string{"INFERGATE_CONFIG": file}, nil, knobs{30 * time.Second, 100, true, "127.0.0.1:2001", "/file/ca.pem", "file.example", "/file/tok", true}},
		{"env over default", env, nil, knobs{time.Minute, 200, false, "127.0.0.1:2002", "/env/ca.pem", "env1.example,env2.example", "/env/tok", false}},
		{"env over file", env, []string{"--config", file}, knobs{time.Minute, 200, false, "127.0.0.1:2002", "/env/ca.pem", "env1.example,env2.example", "/env/tok", false}},
		{"flag over env and file", env, append([]string{"--config", file}, flags...), knobs{2 * time.Minute, 300, true, "127.0.0.1:2003", "/flag/ca.pem", "flag.example", "/flag/tok", true}},
		{"flag equal to the default still wins", nil, []string{"--config", file, "--max-client-conns=0", "--api-open-metrics=false"}, knobs{30 * time.Second, 0, false, "127.0.0.1:2001", "/file/ca.pem", "file.example", "/file/tok", true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, log, res := serveWith(t, tt.env, tt.args...)
			if res.code != 0 {
				t.Fatalf("exit %d: %s", res.code, res.stderr)
			}
			if got := get(o); got != tt.want {
				t.Fatalf("got  %+v\nwant %+v", got, tt.want)
			}
			if _, isJSON := log.Formatter.(*logrus.JSONFormatter); isJSON != tt.want.logJSON {
				t.Fatalf("log formatter %T with log-format %q", log.Formatter, o.LogFormat)
			}
		})
	}
}

// TestServeConfigErrors: a mistake in the file or the environment is a
// usage error (exit 2) naming the key and what it wants; nothing starts.
func TestServeConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		file string
		env  map[string]string
		want []string
	}{
		{"unknown key", "max-client-con: 5\n", nil, []string{`unknown key "max-client-con"`, `did you mean "max-client-conns"`}},
		{"flag spelled with underscores", "prefill_timeout: 5s\n", nil, []string{`unknown key "prefill_timeout"`}},
		{"bad duration", "prefill-timeout: 30\n", nil, []string{`key "prefill-timeout": want a duration such as 30s`}},
		{"bad int", "max-client-conns: lots\n", nil, []string{`key "max-client-conns": want an integer, got "lots"`}},
		{"bad bool", "insecure-api: maybe\n", nil, []string{`key "insecure-api": want a boolean`}},
		{"bad env", "", map[string]string{"INFERGATE_DRAIN_GRACE": "soon"}, []string{`INFERGATE_DRAIN_GRACE="soon": want a duration`}},
		{"bad log format", "log-format: xml\n", nil, []string{`--log-format "xml": want text or json`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			started := false
			res := runEnv(t, cli.Env{
				Getenv: func(k string) string { return tt.env[k] },
				Serve:  func(context.Context, daemon.Options, *logrus.Logger) error { started = true; return nil },
			}, "serve", "--config", writeConfig(t, tt.file))
			if res.code != 2 || started {
				t.Fatalf("exit %d, started %v; stderr %s", res.code, started, res.stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(res.stderr, w) {
					t.Errorf("stderr %q lacks %q", res.stderr, w)
				}
			}
		})
	}
	res := runEnv(t, cli.Env{Getenv: func(string) string { return "" }}, "serve", "--config", "/nonexistent/infergate.yaml")
	if res.code == 0 || !strings.Contains(res.stderr, "/nonexistent/infergate.yaml") {
		t.Fatalf("missing file: exit %d, stderr %s", res.code, res.stderr)
	}
}

// TestServePrintConfig: --print-config prints every option (file, env and
// flags merged) as YAML, starts nothing, and its output read back as a
// --config file gives the same options.
func TestServePrintConfig(t *testing.T) {
	file := writeConfig(t, "prefill-timeout: 30s\napi-allowed-host: [a.example]\nkv-tokenizer: {m: /tok}\n")
	env := map[string]string{"INFERGATE_MAX_CLIENT_CONNS": "77"}
	args := []string{"--config", file, "--api-addr=127.0.0.1:2222", "--log-format=json"}
	started := false
	res := runEnv(t, cli.Env{
		Getenv: func(k string) string { return env[k] },
		Serve:  func(context.Context, daemon.Options, *logrus.Logger) error { started = true; return nil },
	}, append([]string{"serve", "--print-config"}, args...)...)
	if res.code != 0 || started {
		t.Fatalf("exit %d, started %v: %s", res.code, started, res.stderr)
	}
	for _, w := range []string{"prefill-timeout: 30s\n", "max-client-conns: 77\n", "api-addr: 127.0.0.1:2222\n", "log-format: json\n", "  - a.example\n", "m: /tok\n"} {
		if !strings.Contains(res.stdout, w) {
			t.Errorf("--print-config lacks %q:\n%s", w, res.stdout)
		}
	}
	// Every option is printed.
	fields, err := optconf.Fields(&daemon.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fields {
		if !strings.Contains(res.stdout, "\n"+f.Name+":") && !strings.HasPrefix(res.stdout, f.Name+":") {
			t.Errorf("--print-config lacks key %s", f.Name)
		}
	}
	want, _, res1 := serveWith(t, env, args...)
	back, _, res2 := serveWith(t, nil, "--config", writeConfig(t, res.stdout))
	if res1.code != 0 || res2.code != 0 {
		t.Fatalf("exit %d / %d: %s %s", res1.code, res2.code, res1.stderr, res2.stderr)
	}
	a, _ := optconf.Render(&want, optconf.RenderOptions{})
	b, _ := optconf.Render(&back, optconf.RenderOptions{})
	if string(a) != string(b) {
		t.Fatalf("read back:\n%s\nwant:\n%s", b, a)
	}
}

// TestServeSecretsTagged: an option that would hold a secret inline (not a
// path to one) must be tagged optconf:"secret" so --print-config redacts it.
func TestServeSecretsTagged(t *testing.T) {
	fields, err := optconf.Fields(&daemon.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fields {
		n := f.Name
		looksSecret := strings.Contains(n, "password") || strings.Contains(n, "secret") || strings.Contains(n, "token") || strings.HasSuffix(n, "-key")
		isPath := strings.HasSuffix(n, "-file") || strings.HasSuffix(n, "-dir") || n == "api-tls-key" || n == "etcd-key" // PEM file paths
		isKnob := strings.HasPrefix(n, "kv-tokeniz") || strings.Contains(n, "-tokens") || strings.HasSuffix(n, "-per-token") || n == "api-token-reload-interval"
		if looksSecret && !isPath && !isKnob && !f.Secret {
			t.Errorf("option %s looks like an inline secret but is not tagged optconf:\"secret\"", n)
		}
	}
}
