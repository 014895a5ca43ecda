package cli_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/api"
	"github.com/infergate/infergate/api/client/clienttest"
	"github.com/infergate/infergate/buildinfo"
	"github.com/infergate/infergate/cli"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/rules"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
)

// onServer runs the CLI with --server url.
func onServer(t *testing.T, url string, args ...string) result {
	t.Helper()
	return runEnv(t, cli.Env{}, append(args, "--server", url)...)
}

// TestCreateSaysWhatItDid: against the real API, create lb reports what the
// upsert did, field by field, and --dry-run shows it without changing
// anything.
func TestCreateSaysWhatItDid(t *testing.T) {
	ts, store := realAPI(t)
	base := []string{"create", "lb", "127.0.0.10", "--tcp=8080:8000", "--name=pool"}
	steps := []struct {
		name   string
		args   []string
		stdout string
		rules  int // rules stored afterwards
	}{
		{"dry run of a new rule", []string{"--endpoints=127.0.0.21:1", "--dry-run"}, "127.0.0.10:8080/tcp: would be created\n", 0},
		{"create", []string{"--endpoints=127.0.0.21:1"}, "created\n", 1},
		{"same again", []string{"--endpoints=127.0.0.21:1"}, "unchanged\n", 1},
		{"defaults spelled out are no change", []string{"--endpoints=127.0.0.21:1", "--inatimeout=240", "--select=rr"}, "unchanged\n", 1},
		{"dry run of an update", []string{"--endpoints=127.0.0.22:3", "--select=lc", "--dry-run"},
			"127.0.0.10:8080/tcp: would be updated (3 fields)\n" +
				"  ~ endpoints[0].endpointIP: \"127.0.0.21\" → \"127.0.0.22\"\n" +
				"  ~ endpoints[0].weight: 1 → 3\n" +
				"  ~ serviceArguments.sel: (absent) → 4\n", 1},
		{"update", []string{"--endpoints=127.0.0.22:3", "--select=lc"},
			"updated (fields: endpoints[0].endpointIP, endpoints[0].weight, serviceArguments.sel)\n", 1},
	}
	for _, s := range steps {
		res := onServer(t, ts.URL, append(append([]string{}, base...), s.args...)...)
		if res.code != cli.ExitOK || res.stdout != s.stdout {
			t.Fatalf("%s: exit %d\nstdout %q\nwant   %q\nstderr %s", s.name, res.code, res.stdout, s.stdout, res.stderr)
		}
		if n := len(store.List()); n != s.rules {
			t.Fatalf("%s: %d rules stored, want %d", s.name, n, s.rules)
		}
	}
	if got := store.List()[0].Rule; got.ServiceArguments.Sel != 4 || got.Endpoints[0].EndpointIP != "127.0.0.22" {
		t.Fatalf("stored rule after update: %+v", got)
	}
}

// TestSameNameWarned: a second rule taking a name already used is created
// (names are not keys) with a warning, and validate refuses to pick one.
func TestSameNameWarned(t *testing.T) {
	ts, store := realAPI(t)
	create := func(vip string) result {
		return onServer(t, ts.URL, "create", "lb", vip, "--tcp=8080:8000", "--name=pool", "--endpoints=127.0.0.21:1")
	}
	if res := create("127.0.0.10"); res.code != 0 || res.stderr != "" {
		t.Fatalf("first: exit %d stderr %q", res.code, res.stderr)
	}
	res := create("127.0.0.11")
	if res.code != 0 || res.stdout != "created\n" || !strings.Contains(res.stderr, `Warning: name "pool" is also used by 127.0.0.10:8080/tcp`) {
		t.Fatalf("second: exit %d stdout %q stderr %q", res.code, res.stdout, res.stderr)
	}
	if n := len(store.List()); n != 2 {
		t.Fatalf("%d rules, want 2", n)
	}
	res = onServer(t, ts.URL, "validate", "pool", "--settle=10ms")
	if res.code != cli.ExitFailed || !strings.Contains(res.stdout, `2 rules are named "pool" (127.0.0.10:8080/tcp, 127.0.0.11:8080/tcp)`) {
		t.Fatalf("validate pool: exit %d stdout %s stderr %s", res.code, res.stdout, res.stderr)
	}
}

// TestDiffFile: diff -f compares each document with the server's rule of
// the same key and changes nothing.
func TestDiffFile(t *testing.T) {
	ts, store := realAPI(t)
	if res := onServer(t, ts.URL, "create", "lb", "127.0.0.10", "--tcp=8080:8000", "--name=a", "--endpoints=127.0.0.21:1"); res.code != 0 {
		t.Fatalf("seed: %s", res.stderr)
	}
	dir := t.TempDir()
	f := writeFile(t, dir, "rules.yaml", doc(10, "a")+"---\n"+doc(12, "c")+"---\n"+strings.Replace(doc(11, "b"), "weight: 1", "weight: 5", 1))
	if res := onServer(t, ts.URL, "create", "lb", "127.0.0.11", "--tcp=8080:8000", "--name=b", "--endpoints=127.0.0.21:1"); res.code != 0 {
		t.Fatalf("seed b: %s", res.stderr)
	}
	before := store.Generation()
	res := onServer(t, ts.URL, "diff", "-f", f)
	want := f + "#1 127.0.0.10:8080/tcp: unchanged\n" +
		f + "#2 127.0.0.12:8080/tcp: would be created\n" +
		f + "#3 127.0.0.11:8080/tcp: would be updated (1 fields)\n" +
		"  ~ endpoints[0].weight: 1 → 5\n"
	if res.code != cli.ExitOK || res.stdout != want {
		t.Fatalf("exit %d\nstdout\n%s\nwant\n%s\nstderr %s", res.code, res.stdout, want, res.stderr)
	}
	if store.Generation() != before || len(store.List()) != 2 {
		t.Fatalf("diff changed the store")
	}
}

// TestDeleteMissingName: a name no rule has is a 404, as a missing key is.
func TestDeleteMissingName(t *testing.T) {
	ts, _ := realAPI(t)
	res := onServer(t, ts.URL, "delete", "lb", "--name=nobody")
	if res.code != cli.ExitFailed || !strings.Contains(res.stderr, "status:     404") || !strings.Contains(res.stderr, "rule_not_found") {
		t.Fatalf("exit %d stdout %q stderr %q", res.code, res.stdout, res.stderr)
	}
}

// TestServerWithoutScheme: --server host:port means http://host:port.
func TestServerWithoutScheme(t *testing.T) {
	ts, _ := realAPI(t)
	hostPort := strings.TrimPrefix(ts.URL, "http://")
	for _, args := range [][]string{{"get", "lb", "--server", hostPort}, {"get", "lb", "--server", hostPort, "--protocol", "http"}} {
		if res := runEnv(t, cli.Env{}, args...); res.code != cli.ExitOK || !strings.Contains(res.stdout, "EXT IP") {
			t.Fatalf("%v: exit %d stdout %q stderr %q", args, res.code, res.stdout, res.stderr)
		}
	}
	env := cli.Env{Getenv: func(k string) string {
		if k == "INFERGATE_SERVER" {
			return hostPort
		}
		return ""
	}}
	if res := runEnv(t, env, "get", "lb"); res.code != cli.ExitOK {
		t.Fatalf("INFERGATE_SERVER=%s: exit %d stderr %q", hostPort, res.code, res.stderr)
	}
}

// TestSaveCreatesDir: save --lb -c DIR creates DIR (0700) as loxicmd does.
func TestSaveCreatesDir(t *testing.T) {
	ts, _ := realAPI(t)
	dir := filepath.Join(t.TempDir(), "nested", "loxilb")
	res := onServer(t, ts.URL, "save", "--lb", "-c", dir)
	if res.code != cli.ExitOK {
		t.Fatalf("exit %d stderr %q", res.code, res.stderr)
	}
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("dir: %v mode %v, want 0700", err, fi.Mode().Perm())
	}
	if _, err := os.Stat(filepath.Join(dir, "lbconfig.txt")); err != nil {
		t.Fatal(err)
	}
}

type replicaSource struct{ list api.ReplicaList }

func (r replicaSource) Replicas(context.Context) (api.ReplicaList, error) { return r.list, nil }

// apiWithReplicas serves the real API (realAPI's store) with a replica
// source (nil: a file store gateway).
func apiWithReplicas(t *testing.T, src api.ReplicaSource) *httptest.Server {
	t.Helper()
	_, st := realAPI(t)
	log := logrus.New()
	log.SetOutput(ioDiscard{})
	reg := prometheus.NewRegistry()
	opts := api.DefaultOptions()
	opts.Store, opts.Log, opts.Replicas = st, log, src
	opts.Metrics = &metrics.Metrics{Registry: reg, API: metrics.NewAPI(reg)}
	srv, err := api.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return ts
}

// TestGetReplicasViaServer: without --store, get replicas asks the gateway.
func TestGetReplicasViaServer(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	rep := func(id string, rev int64, digest string) api.ReplicaView {
		return api.ReplicaView{ID: id, API: id + ":11111", Revision: rev, Rules: 2, Digest: digest, Updated: at}
	}
	tests := []struct {
		name   string
		src    api.ReplicaSource
		code   int
		stdout []string
		stderr string
	}{
		{"agree", replicaSource{api.ReplicaList{Revision: 9, Replicas: []api.ReplicaView{rep("a", 9, "d1"), rep("b", 8, "d1")}}}, cli.ExitOK,
			[]string{"a a:11111 9 0 2 d1 2026-12-01T10:00:00Z", "b b:11111 8 1 2 d1", "2 replicas serve the same rules (store revision 9)"}, ""},
		{"disagree", replicaSource{api.ReplicaList{Revision: 9, Replicas: []api.ReplicaView{rep("a", 9, "d1"), rep("b", 9, "d2")}}}, cli.ExitFailed,
			[]string{"ID API REVISION LAG RULES DIGEST UPDATED"}, "replicas disagree: 2 different rule sets"},
		{"file store", nil, cli.ExitFailed, nil, "no_shared_store"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ts := apiWithReplicas(t, tc.src)
			res := onServer(t, ts.URL, "get", "replicas")
			if res.code != tc.code || !strings.Contains(res.stderr, tc.stderr) {
				t.Fatalf("exit %d stderr %q", res.code, res.stderr)
			}
			words := strings.Join(strings.Fields(res.stdout), " ") // column widths are not the contract
			for _, want := range tc.stdout {
				if !strings.Contains(words, want) {
					t.Errorf("stdout lacks %q:\n%s", want, res.stdout)
				}
			}
		})
	}
}

func TestVersionCommand(t *testing.T) {
	ts, _ := realAPI(t)
	bi := buildinfo.Get()
	res := onServer(t, ts.URL, "version")
	want := "client: " + bi.String() + "\nserver: " + bi.String() + " (" + ts.URL + ")\n"
	if res.code != cli.ExitOK || res.stdout != want {
		t.Fatalf("exit %d stdout %q, want %q (stderr %q)", res.code, res.stdout, want, res.stderr)
	}

	res = onServer(t, ts.URL, "version", "-o", "json")
	var rep struct {
		Client buildinfo.Info  `json:"client"`
		Server *buildinfo.Info `json:"server"`
	}
	if res.code != cli.ExitOK || json.Unmarshal([]byte(res.stdout), &rep) != nil || rep.Client != bi || rep.Server == nil || *rep.Server != bi {
		t.Fatalf("json: exit %d stdout %s", res.code, res.stdout)
	}

	down := httptest.NewServer(http.NotFoundHandler())
	down.Close() // nothing listens there any more
	res = onServer(t, down.URL, "version")
	if res.code != cli.ExitOK || !strings.HasPrefix(res.stdout, "client: "+bi.String()+"\nserver: not reachable at "+down.URL) {
		t.Fatalf("unreachable server: exit %d stdout %q", res.code, res.stdout)
	}
	res = onServer(t, down.URL, "version", "--client")
	if res.code != cli.ExitOK || res.stdout != "client: "+bi.String()+"\n" {
		t.Fatalf("--client: exit %d stdout %q", res.code, res.stdout)
	}
}

// TestUnprobedShown: endpoints the server reports unprobed read so in the
// wide table, with a hint on stderr naming the rule; probed rules get none.
func TestUnprobedShown(t *testing.T) {
	fake := clienttest.New(t)
	fake.Seed(
		rules.Rule{ServiceArguments: rules.ServiceArguments{ExternalIP: "127.0.0.10", Port: 8080, Protocol: "tcp", Mode: 4, Name: "bare"},
			Endpoints: []rules.Endpoint{{EndpointIP: "127.0.0.21", TargetPort: 8000, Weight: 1, State: "active", Health: "unprobed"}}},
		rules.Rule{ServiceArguments: rules.ServiceArguments{ExternalIP: "127.0.0.11", Port: 8080, Protocol: "tcp", Mode: 4, Name: "probed", ProbeType: "http"},
			Endpoints: []rules.Endpoint{{EndpointIP: "127.0.0.22", TargetPort: 8000, Weight: 1, State: "active", Health: "active"}}},
	)
	res := runCLI(t, fake, "get", "lb", "-o", "wide")
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	if res.code != cli.ExitOK || len(lines) != 3 {
		t.Fatalf("exit %d stdout\n%s", res.code, res.stdout)
	}
	// The wide table ends STATE, HEALTH, COUNTER, ENGINE LOAD.
	if f := strings.Fields(lines[1]); f[len(f)-4] != "unprobed" || f[len(f)-3] != "unprobed" {
		t.Errorf("unprobed row %q: STATE and HEALTH must read unprobed", lines[1])
	}
	if f := strings.Fields(lines[2]); f[len(f)-4] != "active" {
		t.Errorf("probed row %q: STATE must read active", lines[2])
	}
	wantHint := "hint: 127.0.0.10:8080/tcp has no health probe"
	if !strings.Contains(res.stderr, wantHint) || strings.Contains(res.stderr, "127.0.0.11") || !strings.Contains(res.stderr, "--probetype=http") {
		t.Fatalf("stderr %q: want the hint for 127.0.0.10 only", res.stderr)
	}
	if res := runCLI(t, fake, "get", "lb", "-o", "json"); strings.Contains(res.stderr, "hint") {
		t.Fatalf("-o json must stay machine-readable: stderr %q", res.stderr)
	}
}

// TestApplyNamesUpdatedFields: apply -f says which fields an update
// changed, like create lb.
func TestApplyNamesUpdatedFields(t *testing.T) {
	ts, _ := realAPI(t)
	dir := t.TempDir()
	f := writeFile(t, dir, "a.yaml", doc(10, "a"))
	if res := onServer(t, ts.URL, "apply", "-f", f); res.code != 0 || res.stdout != f+"#1 127.0.0.10:8080/tcp created\n" {
		t.Fatalf("first apply: exit %d stdout %q stderr %q", res.code, res.stdout, res.stderr)
	}
	g := writeFile(t, dir, "a.yaml", strings.Replace(doc(10, "a"), "weight: 1", "weight: 4", 1))
	res := onServer(t, ts.URL, "apply", "-f", g)
	if want := g + "#1 127.0.0.10:8080/tcp updated (fields: endpoints[0].weight)\n"; res.code != 0 || res.stdout != want {
		t.Fatalf("update: exit %d stdout %q, want %q", res.code, res.stdout, want)
	}
}
