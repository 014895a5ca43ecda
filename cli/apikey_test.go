package cli_test

import (
	"context"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/infergate/infergate/api"
	"github.com/infergate/infergate/cli"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/rules/store"
	"github.com/infergate/infergate/tenant"
	"github.com/sirupsen/logrus"
)

// keyServer is a real management API with a real key store.
func keyServer(t *testing.T) (string, *tenant.Registry) {
	t.Helper()
	log := logrus.New()
	log.SetLevel(logrus.ErrorLevel)
	dir := t.TempDir()
	rs, err := store.Open(store.Options{StateDir: dir, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Replay(context.Background()); err != nil {
		t.Fatal(err)
	}
	keys, err := tenant.Open(tenant.Options{StateDir: dir, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	o := api.DefaultOptions()
	o.Store, o.Metrics, o.Log, o.Keys = rs, metrics.New(), log, keys
	srv, err := api.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return ts.URL, keys
}

func TestAPIKeyCommands(t *testing.T) {
	url, keys := keyServer(t)
	env := cli.Env{Getenv: func(k string) string {
		if k == "INFERGATE_SERVER" {
			return url
		}
		return ""
	}}
	r := runEnv(t, env, "create", "apikey", "--tenant=team-a", "--name=ci", "--models=llama,qwen", "--rps=5", "--tpm=1000")
	if r.code != 0 {
		t.Fatalf("create: %d %s", r.code, r.stderr)
	}
	raw := regexp.MustCompile(`raw_key: (lxb_\S+)`).FindStringSubmatch(r.stdout)
	id := regexp.MustCompile(`key_id:\s+(\S+)`).FindStringSubmatch(r.stdout)
	if raw == nil || id == nil {
		t.Fatalf("create output: %q", r.stdout)
	}
	if _, d := keys.Admit(tenant.Check{Key: raw[1], Model: "llama"}); d != nil {
		t.Fatalf("the printed key does not work: %+v", d)
	}
	r = runEnv(t, env, "get", "apikey")
	if r.code != 0 || !strings.Contains(r.stdout, id[1]) || !strings.Contains(r.stdout, "llama,qwen") || strings.Contains(r.stdout, raw[1][len("lxb_")+17:]) {
		t.Fatalf("get: %d %q", r.code, r.stdout)
	}
	if r = runEnv(t, env, "update", "apikey", id[1], "--disabled"); r.code != 0 || !strings.Contains(r.stdout, "false") {
		t.Fatalf("update --disabled: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if _, d := keys.Admit(tenant.Check{Key: raw[1], Model: "llama"}); d == nil || d.Code != tenant.CodeKeyDisabled {
		t.Fatalf("disabled via CLI, still admitted: %+v", d)
	}
	if r = runEnv(t, env, "get", "apikey", id[1], "--usage"); r.code != 0 || !strings.Contains(r.stdout, `"requests": 1`) {
		t.Fatalf("usage: %d %q", r.code, r.stdout)
	}
	// A rejection prints the server's code and field.
	if r = runEnv(t, env, "create", "apikey", "--tenant=team-a", "--name=bad", "--rps=10", "--burst=2"); r.code != 1 ||
		!strings.Contains(r.stderr, "invalid_combination") || !strings.Contains(r.stderr, "burst_size") {
		t.Fatalf("bad create: %d %q", r.code, r.stderr)
	}
	if r = runEnv(t, env, "delete", "apikey", id[1]); r.code != 0 {
		t.Fatalf("delete: %d %q", r.code, r.stderr)
	}
	if r = runEnv(t, env, "get", "apikey", id[1]); r.code != 1 || !strings.Contains(r.stderr, "apikey_not_found") {
		t.Fatalf("get after delete: %d %q", r.code, r.stderr)
	}
}

func TestMintThenImport(t *testing.T) {
	url, keys := keyServer(t)
	env := cli.Env{Getenv: func(k string) string {
		if k == "INFERGATE_SERVER" {
			return url
		}
		return ""
	}}
	r := runEnv(t, env, "apikey", "mint", "--tenant=t", "--name=gitops")
	raw := regexp.MustCompile(`(lxb_\S+)`).FindStringSubmatch(r.stderr)
	kid := regexp.MustCompile(`key_id: (\S+)`).FindStringSubmatch(r.stdout)
	hash := regexp.MustCompile(`key_hash: (\S+)`).FindStringSubmatch(r.stdout)
	if r.code != 0 || raw == nil || kid == nil || hash == nil || strings.Contains(r.stdout, raw[1]) {
		t.Fatalf("mint: %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	if r = runEnv(t, env, "create", "apikey", "--tenant=t", "--name=gitops", "--key-id="+kid[1], "--key-hash="+hash[1]); r.code != 0 || strings.Contains(r.stdout, "raw_key") {
		t.Fatalf("import: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if _, d := keys.Admit(tenant.Check{Key: raw[1]}); d != nil {
		t.Fatalf("imported key refused: %+v", d)
	}
}
