package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/api/client/clienttest"
	"github.com/infergate/infergate/cli"
	"github.com/infergate/infergate/daemon"
	"github.com/infergate/infergate/rules"
	"github.com/sirupsen/logrus"
)

type result struct {
	code           int
	stdout, stderr string
}

// runCLI runs the CLI against fake with args.
func runCLI(t *testing.T, fake *clienttest.Server, args ...string) result {
	t.Helper()
	return runEnv(t, cli.Env{Getenv: func(k string) string {
		if k == "INFERGATE_SERVER" && fake != nil {
			return fake.URL
		}
		return ""
	}}, args...)
}

func runEnv(t *testing.T, env cli.Env, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	env.Stdout, env.Stderr = &out, &errb
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code := cli.Main(ctx, args, env)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// posted returns the rule bodies POSTed to the fake.
func posted(t *testing.T, fake *clienttest.Server) []rules.Rule {
	t.Helper()
	var out []rules.Rule
	for _, r := range fake.Requests() {
		if r.Method != http.MethodPost {
			continue
		}
		var rule rules.Rule
		if err := json.Unmarshal(r.Body, &rule); err != nil {
			t.Fatalf("POST body %s: %v", r.Body, err)
		}
		out = append(out, rule)
	}
	return out
}

func TestCreateBody(t *testing.T) {
	sa := func(f func(*rules.ServiceArguments)) rules.ServiceArguments {
		s := rules.ServiceArguments{ExternalIP: "127.0.0.10", Port: 8080, Protocol: "tcp", Mode: 4}
		f(&s)
		return s
	}
	tests := []struct {
		name string
		args []string
		want rules.Rule
	}{
		{
			name: "plain rr",
			args: []string{"--tcp=8080:8000", "--endpoints=127.0.0.21:1,127.0.0.22:2"},
			want: rules.Rule{ServiceArguments: sa(func(*rules.ServiceArguments) {}),
				Endpoints: []rules.Endpoint{{EndpointIP: "127.0.0.21", TargetPort: 8000, Weight: 1}, {EndpointIP: "127.0.0.22", TargetPort: 8000, Weight: 2}}},
		},
		{
			name: "vllm P/D with roles by name and NIXL ports",
			args: []string{"--tcp=8080:8100", "--mode=fullproxy", "--pd-disagg", "--pd-cache-aware", "--pd-session-ttl=600",
				"--pd-cache-threshold=30", "--pd-balance-abs-threshold=4", "--kv-exact-mode=1", "--kv-engine-type=vllm",
				"--kv-zmq-port=5557", "--kv-block-size=16", "--kv-hash-algo=sha256_cbor", "--kv-dp-ranks=2", "--kv-warmup=20",
				"--endpoints=127.0.0.31:1,127.0.0.32:1", "--ep-role=prefill,decode", "--nixl-port=5600,5601", "--name=pd"},
			want: rules.Rule{ServiceArguments: sa(func(s *rules.ServiceArguments) {
				s.Name, s.PDDisaggMode, s.PDCacheAwareMode, s.PDSessionTTLSec = "pd", true, true, 600
				s.PDCacheThreshold, s.PDBalanceAbsThreshold = 30, 4
				s.KVExactMode, s.KVEngineType, s.KVZmqPort, s.KVBlockSize = 1, "vllm", 5557, 16
				s.KVHashAlgo, s.KVDpRankCount, s.KVWarmupSec = "sha256_cbor", 2, 20
			}), Endpoints: []rules.Endpoint{
				{EndpointIP: "127.0.0.31", TargetPort: 8100, Weight: 1, EPRole: 1, NixlPort: 5600},
				{EndpointIP: "127.0.0.32", TargetPort: 8100, Weight: 1, EPRole: 2, NixlPort: 5601}}},
		},
		{
			name: "sglang with numeric roles and bootstrap port",
			args: []string{"--tcp=8080:30000", "--pd-disagg", "--kv-engine-type=sglang", "--pd-bootstrap-port=8998",
				"--endpoints=127.0.0.51:1,127.0.0.52:1,127.0.0.53:1", "--ep-role=1,2,0"},
			want: rules.Rule{ServiceArguments: sa(func(s *rules.ServiceArguments) {
				s.PDDisaggMode, s.KVEngineType, s.PDBootstrapPort = true, "sglang", 8998
			}), Endpoints: []rules.Endpoint{
				{EndpointIP: "127.0.0.51", TargetPort: 30000, Weight: 1, EPRole: 1},
				{EndpointIP: "127.0.0.52", TargetPort: 30000, Weight: 1, EPRole: 2},
				{EndpointIP: "127.0.0.53", TargetPort: 30000, Weight: 1}}},
		},
		{
			name: "classic knobs, IPv6 endpoints and backup",
			args: []string{"--tcp=8080-8081:8000", "--select=lc", "--host=h.example", "--mark=7", "--model-name=llama",
				"--path-prefix=/v1", "--path-match-mode=prefix", "--session-header-name=X-User", "--sse-mode", "--cb-enable",
				"--max-stream-duration=600", "--probetype=http", "--probeport=8001", "--probereq=/health", "--proberesp=ok",
				"--probetimeout=3", "--proberetries=4", "--inatimeout=120",
				"--endpoints=fd00::1:2,[fd00::2]:3,127.0.0.9:1", "--backup=fd00::2"},
			want: rules.Rule{ServiceArguments: sa(func(s *rules.ServiceArguments) {
				s.PortMax, s.Sel, s.Host, s.Block, s.ModelName = 8081, 4, "h.example", 7, "llama"
				s.PathPrefix, s.PathMatchMode, s.SessionHeaderName = "/v1", "prefix", "X-User"
				s.SSEMode, s.CBEnable, s.MaxStreamDurationSec = true, true, 600
				s.ProbeType, s.ProbePort, s.ProbeReq, s.ProbeResp, s.ProbeTimeout, s.ProbeRetries = "http", 8001, "/health", "ok", 3, 4
				s.InactiveTimeOut = 120
			}), Endpoints: []rules.Endpoint{
				{EndpointIP: "fd00::1", TargetPort: 8000, Weight: 2},
				{EndpointIP: "fd00::2", TargetPort: 8000, Weight: 3, Backup: true},
				{EndpointIP: "127.0.0.9", TargetPort: 8000, Weight: 1}}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fake := clienttest.New(t)
			res := runCLI(t, fake, append([]string{"create", "lb", "127.0.0.10"}, tc.args...)...)
			if res.code != cli.ExitOK || strings.TrimSpace(res.stdout) != "created" {
				t.Fatalf("exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
			}
			got := posted(t, fake)
			if len(got) != 1 {
				t.Fatalf("%d POSTs, want 1", len(got))
			}
			if !reflect.DeepEqual(got[0], tc.want) {
				gb, _ := json.Marshal(got[0])
				wb, _ := json.Marshal(tc.want)
				t.Fatalf("POST body\n got %s\nwant %s", gb, wb)
			}
		})
	}
}

// TestUsageErrors: problems the CLI can see exit 2 before any request.
func TestUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"role count", []string{"create", "lb", "127.0.0.10", "--tcp=80:80", "--endpoints=127.0.0.1:1,127.0.0.2:1", "--ep-role=prefill"},
			"--ep-role count (1) must match --endpoints count (2)"},
		{"nixl count", []string{"create", "lb", "127.0.0.10", "--tcp=80:80", "--endpoints=127.0.0.1:1", "--nixl-port=1,2"},
			"--nixl-port count (2) must match --endpoints count (1)"},
		{"role name", []string{"create", "lb", "127.0.0.10", "--tcp=80:80", "--endpoints=127.0.0.1:1", "--ep-role=context"},
			"endpoint role 'context' is invalid"},
		{"mode", []string{"create", "lb", "127.0.0.10", "--tcp=80:80", "--endpoints=127.0.0.1:1", "--mode=onearm"},
			"only serves --mode=fullproxy"},
		{"select", []string{"create", "lb", "127.0.0.10", "--tcp=80:80", "--endpoints=127.0.0.1:1", "--select=random"},
			"--select \"random\""},
		{"missing tcp", []string{"create", "lb", "127.0.0.10", "--endpoints=127.0.0.1:1"}, "--tcp"},
		{"missing endpoints", []string{"create", "lb", "127.0.0.10", "--tcp=80:80"}, "--endpoints is required"},
		{"backup not an endpoint", []string{"create", "lb", "127.0.0.10", "--tcp=80:80", "--endpoints=127.0.0.1:1", "--backup=127.0.0.2"},
			"--backup \"127.0.0.2\""},
		{"no VIP", []string{"create", "lb", "--tcp=80:80"}, "takes 1 argument"},
		{"unknown flag", []string{"create", "lb", "127.0.0.10", "--bogus"}, "unknown flag: --bogus"},
		{"unknown command", []string{"frobnicate"}, "unknown command"},
		{"unknown subcommand", []string{"create", "vip"}, "unknown command \"vip\""},
		{"group alone", []string{"get"}, "needs a subcommand"},
		{"bad output", []string{"get", "lb", "-o", "xml"}, "-o \"xml\""},
		{"get one without tcp", []string{"get", "lb", "127.0.0.10"}, "needs --tcp"},
		{"compiled without VIP", []string{"get", "lb", "--compiled"}, "need a VIP"},
		{"delete both", []string{"delete", "lb", "127.0.0.10", "--tcp=80", "--name=x"}, "not both"},
		{"delete nothing", []string{"delete", "lb"}, "needs <VIP>"},
		{"delete without -f", []string{"delete"}, "-f"},
		{"apply without -f", []string{"apply"}, "-f <file|dir> is required"},
		{"apply with args", []string{"apply", "x.yaml"}, "takes 0 argument"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fake := clienttest.New(t)
			res := runCLI(t, fake, tc.args...)
			if res.code != cli.ExitUsage {
				t.Fatalf("exit %d, want %d; stderr %q", res.code, cli.ExitUsage, res.stderr)
			}
			if !strings.Contains(res.stderr, tc.want) {
				t.Fatalf("stderr %q lacks %q", res.stderr, tc.want)
			}
			if n := len(fake.Requests()); n != 0 {
				t.Fatalf("%d requests sent; usage errors must not reach the server", n)
			}
		})
	}
}

// TestRejectionPrinted: a server rejection prints every field of the error
// envelope on stderr and exits 1.
func TestRejectionPrinted(t *testing.T) {
	fake := clienttest.New(t)
	res := runCLI(t, fake, "create", "lb", "127.0.0.10", "--tcp=80:80", "--endpoints=127.0.0.1:1", "--name="+clienttest.RejectRuleNamed)
	if res.code != cli.ExitFailed {
		t.Fatalf("exit %d, want 1; stderr %q", res.code, res.stderr)
	}
	for _, want := range []string{"rejected by the fake", "invalid_combination", "serviceArguments.name", "status:     400"} {
		if !strings.Contains(res.stderr, want) {
			t.Errorf("stderr %q lacks %q", res.stderr, want)
		}
	}
	if res.stdout != "" {
		t.Errorf("stdout %q, want empty", res.stdout)
	}
}

func TestServerUnreachable(t *testing.T) {
	fake := clienttest.New(t)
	url := fake.URL
	fake.Close() // nothing listens there any more
	res := runEnv(t, cli.Env{Getenv: func(string) string { return url }}, "get", "lb")
	if res.code != cli.ExitFailed || !strings.Contains(res.stderr, "unreachable") {
		t.Fatalf("exit %d stderr %q", res.code, res.stderr)
	}
}

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const ruleDoc = `apiVersion: infergate/v1
kind: Loadbalancer
spec:
  serviceArguments: {externalIP: 127.0.0.%d, port: 8080, protocol: tcp, mode: 4, name: %s}
  endpoints:
    - {endpointIP: 127.0.0.21, targetPort: 8000, weight: 1}
`

func doc(ip int, name string) string { return fmt.Sprintf(ruleDoc, ip, name) }

// TestApplyFile: every rule is tried, rejections are reported and make the
// exit code 1, and a second run is all unchanged.
func TestApplyFile(t *testing.T) {
	fake := clienttest.New(t)
	dir := t.TempDir()
	f := writeFile(t, dir, "rules.yaml", doc(10, "a")+"---\n"+doc(11, clienttest.RejectRuleNamed)+"---\n"+doc(12, "c"))

	res := runCLI(t, fake, "apply", "-f", f)
	if res.code != cli.ExitFailed {
		t.Fatalf("exit %d, want 1; stderr %q", res.code, res.stderr)
	}
	wantOut := f + "#1 127.0.0.10:8080/tcp created\n" + f + "#3 127.0.0.12:8080/tcp created\n"
	if res.stdout != wantOut {
		t.Fatalf("stdout\n%s\nwant\n%s", res.stdout, wantOut)
	}
	for _, want := range []string{f + "#2 127.0.0.11:8080/tcp rejected", "rejected by the fake", "1 of 3 documents not applied"} {
		if !strings.Contains(res.stderr, want) {
			t.Errorf("stderr %q lacks %q", res.stderr, want)
		}
	}

	good := writeFile(t, dir, "good.yaml", doc(10, "a")+"---\n"+doc(12, "c"))
	res = runCLI(t, fake, "apply", "-f", good)
	want := good + "#1 127.0.0.10:8080/tcp unchanged\n" + good + "#2 127.0.0.12:8080/tcp unchanged\n"
	if res.code != cli.ExitOK || res.stdout != want {
		t.Fatalf("second apply: exit %d stdout %q stderr %q", res.code, res.stdout, res.stderr)
	}

	// A file that does not load applies nothing.
	before := len(fake.Requests())
	bad := writeFile(t, dir, "bad.yaml", doc(13, "d")+"---\nkind: LoadBalancer\napiVersion: netlox/v1\nspec: {}\n")
	res = runCLI(t, fake, "apply", "-f", bad)
	if res.code != cli.ExitFailed || !strings.Contains(res.stderr, "bad.yaml#2") || !strings.Contains(res.stderr, `did you mean "Loadbalancer"`) {
		t.Fatalf("bad file: exit %d stderr %q", res.code, res.stderr)
	}
	if n := len(fake.Requests()); n != before {
		t.Fatalf("bad file sent %d requests", n-before)
	}
}

func TestApplyDirectoryAndDeleteFiles(t *testing.T) {
	fake := clienttest.New(t)
	dir := t.TempDir()
	writeFile(t, dir, "b.yml", doc(11, "b"))
	writeFile(t, dir, "a.yaml", doc(10, "a"))
	writeFile(t, dir, "README.md", "not a rule")
	res := runCLI(t, fake, "apply", "-f", dir)
	want := filepath.Join(dir, "a.yaml") + "#1 127.0.0.10:8080/tcp created\n" + filepath.Join(dir, "b.yml") + "#1 127.0.0.11:8080/tcp created\n"
	if res.code != cli.ExitOK || res.stdout != want {
		t.Fatalf("exit %d stdout %q stderr %q", res.code, res.stdout, res.stderr)
	}
	res = runCLI(t, fake, "delete", "-f", dir)
	if res.code != cli.ExitOK || strings.Count(res.stdout, " deleted\n") != 2 || len(fake.Rules()) != 0 {
		t.Fatalf("delete -f: exit %d stdout %q stderr %q rules %v", res.code, res.stdout, res.stderr, fake.Rules())
	}
	res = runCLI(t, fake, "delete", "-f", dir)
	if res.code != cli.ExitFailed || !strings.Contains(res.stderr, "rule_not_found") {
		t.Fatalf("delete -f of absent rules: exit %d stderr %q", res.code, res.stderr)
	}
	res = runCLI(t, fake, "delete", "-f", dir, "--ignore-not-found")
	if res.code != cli.ExitOK || strings.Count(res.stdout, " not found\n") != 2 {
		t.Fatalf("--ignore-not-found: exit %d stdout %q stderr %q", res.code, res.stdout, res.stderr)
	}
}

func seedRules() []rules.Rule {
	return []rules.Rule{
		{ServiceArguments: rules.ServiceArguments{ExternalIP: "127.0.0.11", Port: 8080, Protocol: "tcp", Mode: 4, Sel: 4,
			Name: "pd", PDDisaggMode: true, PDCacheAwareMode: true, KVExactMode: 1, KVEngineType: "vllm"},
			Endpoints: []rules.Endpoint{
				{EndpointIP: "127.0.0.31", TargetPort: 8100, Weight: 1, EPRole: 1, NixlPort: 5600, State: "active", Counter: "1:2",
					KVConnector: "NixlConnector", KVBlockSize: 16,
					EngineLoad: "waiting=3,running=12,kv=41%,age=0.2s", WindowLoad: "16/16,full"},
				{EndpointIP: "127.0.0.32", TargetPort: 8200, Weight: 1, EPRole: 2, Backup: true}},
			Status: &rules.RuleStatus{Ready: true, Queue: "queued=2,oldest=1.5s,shed=7"}},
		{ServiceArguments: rules.ServiceArguments{ExternalIP: "127.0.0.9", Port: 8080, Protocol: "tcp", Mode: 4, Name: "rr", Block: 3},
			Endpoints: []rules.Endpoint{{EndpointIP: "127.0.0.21", TargetPort: 8000, Weight: 2}}},
	}
}

func TestGetOutputs(t *testing.T) {
	fake := clienttest.New(t)
	fake.Seed(seedRules()...)

	res := runCLI(t, fake, "get", "lb")
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	if res.code != cli.ExitOK || len(lines) != 3 {
		t.Fatalf("table: exit %d stdout\n%s", res.code, res.stdout)
	}
	wantTable := [][]string{
		{"EXT", "IP", "PORT", "PROTO", "NAME", "MARK", "SEL", "MODE", "ENDPOINTS", "ENGINE", "P/D"},
		{"127.0.0.9", "8080", "tcp", "rr", "3", "rr", "fullproxy", "1", "-", "-"}, // sorted numerically by VIP
		{"127.0.0.11", "8080", "tcp", "pd", "0", "lc", "fullproxy", "2", "vllm", "pd,cache-aware,kv1"},
	}
	for i, w := range wantTable {
		if got := strings.Fields(lines[i]); !reflect.DeepEqual(got, w) {
			t.Errorf("table line %d = %q, want %q", i, got, w)
		}
	}

	res = runCLI(t, fake, "get", "lb", "-o", "wide")
	wide := strings.Split(strings.TrimSpace(res.stdout), "\n")
	wantWide := [][]string{
		{"EXT", "IP", "PORT", "PROTO", "NAME", "MARK", "SEL", "MODE", "ENGINE", "P/D", "HOST", "MODEL", "QUEUE", "ENDPOINT", "EPORT", "WEIGHT", "ROLE", "NIXL", "PORT", "PAIRING", "WINDOW", "STATE", "HEALTH", "COUNTER", "ENGINE", "LOAD"},
		{"127.0.0.9", "8080", "tcp", "rr", "3", "rr", "fullproxy", "-", "-", "-", "-", "-", "127.0.0.21", "8000", "2", "normal", "-", "-", "-", "-", "-", "-", "-"},
		{"127.0.0.11", "8080", "tcp", "pd", "0", "lc", "fullproxy", "vllm", "pd,cache-aware,kv1", "-", "-", "queued=2,oldest=1.5s,shed=7", "127.0.0.31", "8100", "1", "prefill", "5600", "block_size=16,kv_connector=NixlConnector", "16/16,full", "active", "-", "1:2", "waiting=3,running=12,kv=41%,age=0.2s"},
		{"127.0.0.32", "8200", "1", "decode,backup", "-", "-", "-", "-", "-", "-", "-"}, // one row per endpoint, rule cells blank
	}
	if len(wide) != len(wantWide) {
		t.Fatalf("wide: %d lines, want %d:\n%s", len(wide), len(wantWide), res.stdout)
	}
	for i, w := range wantWide {
		if got := strings.Fields(wide[i]); !reflect.DeepEqual(got, w) {
			t.Errorf("wide line %d = %q, want %q", i, got, w)
		}
	}

	res = runCLI(t, fake, "get", "lb", "-o", "json", "--name=pd")
	var list rules.RuleList
	if err := json.Unmarshal([]byte(res.stdout), &list); err != nil || len(list.LbAttr) != 1 || list.LbAttr[0].ServiceArguments.Name != "pd" {
		t.Fatalf("json --name=pd: %v %s", err, res.stdout)
	}

	res = runCLI(t, fake, "get", "lb", "127.0.0.9", "--tcp=8080", "--compiled")
	if res.code != cli.ExitOK || !strings.Contains(res.stdout, `"Name": "rr"`) {
		t.Fatalf("compiled: exit %d stdout %q stderr %q", res.code, res.stdout, res.stderr)
	}
	res = runCLI(t, fake, "get", "lb", "127.0.0.11", "--tcp=8080", "-o", "json")
	var one rules.Rule
	if err := json.Unmarshal([]byte(res.stdout), &one); err != nil || one.ServiceArguments.Name != "pd" {
		t.Fatalf("get one -o json: %v %s", err, res.stdout)
	}
	res = runCLI(t, fake, "get", "lb", "127.0.0.11", "--tcp=8080")
	if lines := strings.Split(strings.TrimSpace(res.stdout), "\n"); res.code != cli.ExitOK || len(lines) != 2 ||
		!reflect.DeepEqual(strings.Fields(lines[1]), wantTable[2]) {
		t.Fatalf("get one as table: exit %d\n%s", res.code, res.stdout)
	}
	res = runCLI(t, fake, "get", "lb", "127.0.0.99", "--tcp=8080")
	if res.code != cli.ExitFailed || !strings.Contains(res.stderr, "404") {
		t.Fatalf("missing rule: exit %d stderr %q", res.code, res.stderr)
	}
}

// TestYAMLRoundTrip: `get lb -o yaml` output applied back changes nothing,
// output-only fields included.
func TestYAMLRoundTrip(t *testing.T) {
	fake := clienttest.New(t)
	seeded := seedRules()
	for i := range seeded { // what a real server stores: no output-only fields
		seeded[i].Status = nil
		for j := range seeded[i].Endpoints {
			ep := &seeded[i].Endpoints[j]
			ep.State, ep.Counter, ep.EngineLoad, ep.WindowLoad = "", "", "", ""
		}
	}
	// Values YAML would misread unquoted: a bool-like name, a float-like
	// model, an IPv6 VIP.
	tricky := rules.Rule{ServiceArguments: rules.ServiceArguments{ExternalIP: "::1", Port: 8080, Protocol: "tcp", Mode: 4,
		Name: "true", ModelName: "1.0", Host: "null", PathPrefix: "/v1: x"},
		Endpoints: []rules.Endpoint{{EndpointIP: "::2", TargetPort: 8000, Weight: 1}}}
	fake.Seed(append(seedRules(), tricky)...)
	res := runCLI(t, fake, "get", "lb", "-o", "yaml")
	if res.code != cli.ExitOK || strings.Count(res.stdout, "kind: Loadbalancer") != 3 {
		t.Fatalf("yaml: exit %d\n%s", res.code, res.stdout)
	}
	if strings.Contains(res.stdout, "state:") || strings.Contains(res.stdout, "status:") {
		t.Fatalf("yaml carries output-only fields:\n%s", res.stdout)
	}
	f := writeFile(t, t.TempDir(), "dump.yaml", res.stdout)
	docs, err := rules.LoadFiles(f)
	if err != nil {
		t.Fatal(err)
	}
	want := []rules.Rule{seeded[1], seeded[0], tricky} // printed sorted by VIP, IPv4 first
	if len(docs) != len(want) {
		t.Fatalf("%d documents, want %d", len(docs), len(want))
	}
	for i, d := range docs {
		if !reflect.DeepEqual(d.Rule, want[i]) {
			t.Fatalf("document %d = %+v, want %+v", i+1, d.Rule, want[i])
		}
	}
}

func TestDeleteLB(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"by key", []string{"127.0.0.10", "--tcp=8080"},
			"/netlox/v1/config/loadbalancer/hosturl/any/externalipaddress/127.0.0.10/port/8080/protocol/tcp"},
		{"full key", []string{"127.0.0.10", "--tcp=8080", "--host=h.example", "--mark=3", "--path-prefix=/v1",
			"--path-match-mode=prefix", "--model-name=llama"},
			"/netlox/v1/config/loadbalancer/hosturl/h.example/externalipaddress/127.0.0.10/port/8080/protocol/tcp?block=3&model_name=llama&path_match_mode=prefix&path_prefix=%2Fv1"},
		{"by name", []string{"--name=pool"}, "/netlox/v1/config/loadbalancer/name/pool"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fake := clienttest.New(t)
			if tc.name == "by name" {
				fake.Seed(rules.Rule{ServiceArguments: rules.ServiceArguments{ExternalIP: "127.0.0.10", Port: 8080, Protocol: "tcp", Mode: 4, Name: "pool"}})
			}
			res := runCLI(t, fake, append([]string{"delete", "lb"}, tc.args...)...)
			reqs := fake.Requests()
			if len(reqs) != 1 || reqs[0].Method != http.MethodDelete || reqs[0].Path != tc.want {
				t.Fatalf("requests %+v, want DELETE %s", reqs, tc.want)
			}
			if tc.name == "by name" && (res.code != cli.ExitOK || strings.TrimSpace(res.stdout) != "Success") {
				t.Fatalf("exit %d stdout %q", res.code, res.stdout)
			}
			if tc.name != "by name" && res.code != cli.ExitFailed { // the fake holds no rule: 404
				t.Fatalf("exit %d, want 1 for a missing rule", res.code)
			}
		})
	}
}

func TestServeOptions(t *testing.T) {
	var got daemon.Options
	var gotLevel logrus.Level
	serve := func(ctx context.Context, o daemon.Options, log *logrus.Logger) error {
		got, gotLevel = o, log.GetLevel()
		if ctx.Err() != nil {
			return errors.New("ctx cancelled before serving")
		}
		return nil
	}
	res := runEnv(t, cli.Env{Serve: serve}, "serve", "--api-addr=127.0.0.1:1", "--state-dir=/tmp/x", "--rules=configs",
		"--bind-any-vip", "--log-level=debug", "--max-body-bytes=1024", "--breaker-connect-failures=7",
		"--breaker-pd-connect-failures=2", "--breaker-5xx-streak=0", "--breaker-open-for=5s", "--drain-grace=1s",
		"--prefill-timeout=2s", "--decode-first-byte-timeout=3s", "--shutdown-timeout=4s",
		"--first-byte-timeout=6s", "--body-stall-timeout=7s", "--stream-idle-timeout=8s")
	if res.code != cli.ExitOK {
		t.Fatalf("exit %d stderr %q", res.code, res.stderr)
	}
	want := daemon.DefaultOptions()
	want.APIAddr, want.StateDir, want.RulesPath, want.BindAnyVIP, want.LogLevel = "127.0.0.1:1", "/tmp/x", "configs", true, "debug"
	want.MaxBodyBytes, want.BreakerConnectFailures, want.BreakerPDConnectFailures, want.Breaker5xxStreak = 1024, 7, 2, 0
	want.BreakerOpenFor, want.DrainGrace, want.PrefillTimeout, want.DecodeFirstByteTimeout = 5*time.Second, time.Second, 2*time.Second, 3*time.Second
	want.ShutdownTimeout = 4 * time.Second
	want.FirstByteTimeout, want.BodyStallTimeout, want.StreamIdleTimeout = 6*time.Second, 7*time.Second, 8*time.Second
	if !reflect.DeepEqual(got, want) || gotLevel != logrus.DebugLevel {
		t.Fatalf("options %+v level %v\nwant %+v", got, gotLevel, want)
	}

	res = runEnv(t, cli.Env{Serve: serve}, "serve")
	if res.code != cli.ExitOK || !reflect.DeepEqual(got, daemon.DefaultOptions()) {
		t.Fatalf("defaults: exit %d options %+v", res.code, got)
	}
	if res := runEnv(t, cli.Env{Serve: serve}, "serve", "--log-level=loud"); res.code != cli.ExitUsage {
		t.Fatalf("bad log level: exit %d", res.code)
	}
	failing := func(context.Context, daemon.Options, *logrus.Logger) error { return errors.New("address in use") }
	if res := runEnv(t, cli.Env{Serve: failing}, "serve"); res.code != cli.ExitFailed || !strings.Contains(res.stderr, "address in use") {
		t.Fatalf("failing serve: exit %d stderr %q", res.code, res.stderr)
	}
	if res := runEnv(t, cli.Env{}, "serve"); res.code != cli.ExitFailed {
		t.Fatalf("no serve func: exit %d", res.code)
	}
}

func TestServerFlagAndEnv(t *testing.T) {
	envFake, flagFake := clienttest.New(t), clienttest.New(t)
	env := cli.Env{Getenv: func(k string) string {
		if k == "INFERGATE_SERVER" {
			return envFake.URL
		}
		return ""
	}}
	runEnv(t, env, "get", "lb")
	runEnv(t, env, "get", "lb", "--server", flagFake.URL)
	if len(envFake.Requests()) != 1 || len(flagFake.Requests()) != 1 {
		t.Fatalf("env fake got %d requests, flag fake %d; want 1 each", len(envFake.Requests()), len(flagFake.Requests()))
	}
}

// TestTimeoutFlag: a server that never answers fails the command after
// --timeout instead of hanging it.
func TestTimeoutFlag(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // runs before srv.Close
	res := runEnv(t, cli.Env{}, "get", "lb", "--server", srv.URL, "--timeout", "200ms")
	if res.code != cli.ExitFailed || !strings.Contains(res.stderr, "Client.Timeout") {
		t.Fatalf("exit %d stderr %q", res.code, res.stderr)
	}
}
