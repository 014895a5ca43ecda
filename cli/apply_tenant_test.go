package cli_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/infergate/infergate/cli"
	"github.com/infergate/infergate/tenant"
)

const gitopsRule = `apiVersion: netlox/v1
kind: Loadbalancer
metadata:
  name: keyed
spec:
  serviceArguments:
    externalIP: 127.0.0.41
    port: 8080
    protocol: tcp
    mode: 4
    api_key_auth: required
  endpoints:
  - endpointIP: 127.0.0.42
    targetPort: 8001
    weight: 1
`

// TestApplyTenantDocuments drives apply -f and delete -f over a real API
// and key store with a file mixing a rule, a minted key and a tenant limit.
func TestApplyTenantDocuments(t *testing.T) {
	url, keys := keyServer(t)
	env := cli.Env{Getenv: func(k string) string {
		if k == "INFERGATE_SERVER" {
			return url
		}
		return ""
	}}
	mint := runEnv(t, env, "apikey", "mint", "--tenant=team-a", "--name=ci")
	raw := regexp.MustCompile(`(lxb_\S+)`).FindString(mint.stderr)
	if mint.code != 0 || raw == "" || strings.Contains(mint.stdout, raw) {
		t.Fatalf("mint: %d %q %q", mint.code, mint.stdout, mint.stderr)
	}
	id := regexp.MustCompile(`key_id: (\S+)`).FindStringSubmatch(mint.stdout)[1]
	keyDoc := strings.ReplaceAll(strings.TrimSpace(mint.stdout), "\n    ", "\n  ") // yaml.v3 indents by 4
	limitDoc := "apiVersion: infergate/v1\nkind: TenantLimit\nspec:\n  tenant_id: team-a\n  rps: 50\n"
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	settings := "\n  allowed_models: [m1]\n  rate_limit_rps: 5\n  tokens_per_min: 1000\n"
	file := write("all.yaml", gitopsRule+"---\n"+keyDoc+settings+"---\n"+limitDoc)

	steps := []struct {
		name   string
		args   []string
		before func()
		code   int
		out    []string // each must be in stdout
		errOut string   // must be in stderr
	}{
		{name: "first apply creates all three", args: []string{"apply", "-f", file}, code: 0,
			out: []string{"127.0.0.41:8080/tcp created", "ApiKey team-a/ci (" + id + ") created", "TenantLimit team-a created"}},
		{name: "re-apply is unchanged", args: []string{"apply", "-f", file}, code: 0,
			out: []string{"127.0.0.41:8080/tcp unchanged", "ApiKey team-a/ci (" + id + ") unchanged", "TenantLimit team-a unchanged"}},
		{name: "changed settings are updated", args: []string{"apply", "-f", file}, code: 0,
			before: func() {
				write("all.yaml", gitopsRule+"---\n"+keyDoc+"\n  allowed_models: [m1, m2]\n  rate_limit_rps: 7\n  tokens_per_min: 2000\n  enabled: false\n---\n"+strings.Replace(limitDoc, "50", "60", 1))
			},
			out: []string{"ApiKey team-a/ci (" + id + ") updated", "TenantLimit team-a updated"}},
		{name: "dropping a limit is refused, not ignored", args: []string{"apply", "-f", file}, code: 1,
			before: func() {
				write("all.yaml", keyDoc+"\n  allowed_models: [m1, m2]\n  rate_limit_rps: 7\n  enabled: false\n")
			},
			errOut: "tokens_per_min"},
		{name: "another hash for the same id is a conflict", args: []string{"apply", "-f", file}, code: 1,
			before: func() {
				other := regexp.MustCompile(`key_hash: \S+`).ReplaceAllLiteralString(keyDoc, "key_hash: sha256$"+strings.Repeat("00", 16)+"$"+strings.Repeat("11", 32))
				write("all.yaml", other+"\n")
			},
			errOut: tenant.CodeKeyConflict},
		{name: "a raw key in the file applies nothing", args: []string{"apply", "-f", file}, code: 1,
			before: func() { write("all.yaml", gitopsRule+"---\n"+keyDoc+"\n  raw_key: "+raw+"\n") },
			errOut: "must not hold the raw key"},
		{name: "delete -f removes all three", args: []string{"delete", "-f", file}, code: 0,
			before: func() { write("all.yaml", gitopsRule+"---\n"+keyDoc+"\n---\n"+limitDoc) },
			out:    []string{"127.0.0.41:8080/tcp deleted", "ApiKey team-a/ci (" + id + ") deleted", "TenantLimit team-a deleted"}},
		{name: "delete -f again with --ignore-not-found", args: []string{"delete", "-f", file, "--ignore-not-found"}, code: 0,
			out: []string{"ApiKey team-a/ci (" + id + ") not found", "TenantLimit team-a not found"}},
	}
	for _, s := range steps {
		if s.before != nil {
			s.before()
		}
		r := runEnv(t, env, s.args...)
		if r.code != s.code {
			t.Fatalf("%s: exit %d, want %d\nstdout %s\nstderr %s", s.name, r.code, s.code, r.stdout, r.stderr)
		}
		for _, o := range s.out {
			if !strings.Contains(r.stdout, o) {
				t.Fatalf("%s: stdout lacks %q:\n%s", s.name, o, r.stdout)
			}
		}
		if !strings.Contains(r.stderr, s.errOut) {
			t.Fatalf("%s: stderr lacks %q:\n%s", s.name, s.errOut, r.stderr)
		}
		if strings.Contains(r.stdout+r.stderr, raw[len(raw)-20:]) {
			t.Fatalf("%s: the raw key's secret was printed", s.name)
		}
		switch s.name {
		case "first apply creates all three":
			if _, d := keys.Admit(tenant.Check{Key: raw, Model: "m1"}); d != nil {
				t.Fatalf("the minted key does not work after apply: %+v", d)
			}
		case "changed settings are updated":
			k, err := keys.Get(id)
			if err != nil || k.RateLimitRPS != 7 || k.TokensPerMin != 2000 || k.Enabled || len(k.AllowedModels) != 2 {
				t.Fatalf("after update: %+v %v", k, err)
			}
			if tl := keys.TenantLimits("team-a"); len(tl) != 1 || *tl[0].RPS != 60 {
				t.Fatalf("tenant limit after update: %+v", tl)
			}
		case "a raw key in the file applies nothing":
			if k, _ := keys.Get(id); k.TokensPerMin != 2000 {
				t.Fatalf("a rejected file changed the key: %+v", k)
			}
		}
	}
	if _, err := keys.Get(id); err == nil {
		t.Fatal("key still exists after delete -f")
	}
}
