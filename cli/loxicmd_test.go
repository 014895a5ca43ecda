package cli_test

import (
	"encoding/json"
	"net"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/infergate/infergate/api"
	"github.com/infergate/infergate/cli"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/rules"
	"github.com/infergate/infergate/rules/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
)

// realAPI serves the real management API (validation included) over a
// memory store, so command lines get the server's real answers.
func realAPI(t *testing.T) (*httptest.Server, *store.Store) {
	t.Helper()
	log := logrus.New()
	log.SetOutput(ioDiscard{})
	rs, err := store.Open(store.Options{Log: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Replay(t.Context()); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	opts := api.DefaultOptions()
	opts.Store, opts.Log = rs, log
	opts.Metrics = &metrics.Metrics{Registry: reg, API: metrics.NewAPI(reg)}
	srv, err := api.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return ts, rs
}

type ioDiscard struct{}

func (ioDiscard) Write(p []byte) (int, error) { return len(p), nil }

// loxiArgs are loxicmd's connection flags pointing at ts.
func loxiArgs(t *testing.T, ts *httptest.Server) []string {
	u, err := url.Parse(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(u.Host)
	return []string{"-s", host, "-p", port, "--protocol", "http"}
}

// Command lines from LoxiLB's docs, scripts and loxicmd's help, run as
// written (only "loxicmd" becomes "infergate"). Shapes infergate serves are
// created; the others are refused with the server's (or a usage) message
// naming what is not served — never silently dropped.
func TestLoxicmdCommandLines(t *testing.T) {
	tests := []struct {
		line  string
		code  int    // exit code
		field string // server error field on refusal ("" = none expected)
	}{
		// LoxiLB inference-gateway docs / cicd (fullproxy AI rules).
		{"create lb 192.0.2.12 --tcp=2020:80 --mode=fullproxy --pd-disagg --kv-exact-mode=1 --kv-zmq-port=5557 --kv-hash-algo=sha256_cbor --kv-warmup=20 --kv-block-size=16 --endpoints=203.0.113.1:1,203.0.113.2:1 --ep-role=prefill,decode --nixl-port=9001,9002", 0, ""},
		{"create lb 192.0.2.13 --tcp=8080:8000 --mode=fullproxy --select=chwbl --chwbl-hash-level=2 --chwbl-load-factor=150 --chwbl-replication=200 --endpoints=31.31.31.1:1,32.32.32.1:1", 0, ""},
		{"create lb 192.0.2.14 --tcp=8080:8000 --mode=fullproxy --select=persist --session-header-name=X-Session-ID --sse-mode --cb-enable --backend-protocol=http1 --backend-keepalive-interval=60 --monitor --endpoints=31.31.31.1:1", 0, ""},
		{"create lb 192.0.2.15 --tcp=8080:8000 --mode=fullproxy --probetype=http --probeport=8000 --probereq=/health --probetimeout=5 --proberetries=2 --name=vllm-pool --endpoints=31.31.31.1:1,31.31.31.2:2", 0, ""},
		{"create lb 192.0.2.16 --tcp=8080:8000 --mode=fullproxy --kv-engine-type=sglang --pd-disagg --pd-bootstrap-port=8998 --endpoints=31.31.31.1:1,32.32.32.1:1 --ep-role=prefill,decode", 0, ""},
		{"create lb 192.0.2.17 --tcp=8080:8000 --mode=fullproxy --kv-exact-mode=3 --kv-engine-type=trtllm --endpoints=31.31.31.1:1,31.31.31.2:1", 0, ""},
		{"create lb 192.0.2.18 --tcp=8080:8000 --mode=fullproxy --model-name=llama-70b --path-prefix=/v1 --path-match-mode=prefix --host=llm.example.com --mark=7 --inatimeout=600 --endpoints=31.31.31.1:1", 0, ""},
		{"create lb 192.0.2.19 --tcp=8080:8000 --mode=fullproxy --api-key-auth=disabled --endpoints=31.31.31.1:1", 0, ""},
		{"create lb 10.10.10.254 --tcp=9090:30000 --endpoints=35.35.35.1:1,36.36.36.1:1,37.37.37.1:1 --mode=fullproxy --select=rr --host=10.10.10.254 --proberetries=1 --kv-exact-mode=3 --kv-engine-type=sglang --kv-block-size=16 --kv-zmq-port=5561 --kv-dp-ranks=3 --kv-warmup=10", 0, ""},
		{"create lb 10.10.10.254 --tcp=2020:8080 --select=rr --mode=fullproxy --sse-mode=true --host=10.10.10.254 --endpoints=31.31.31.1:1,32.32.32.1:1", 0, ""},
		{"create lb 10.10.10.254 --tcp=8080:8000 --endpoints=31.31.31.1:1 --select=chwbl --mode=fullproxy", 0, ""},
		{"create lb 20.20.20.1 --select=priority --tcp=2020:8080 --endpoints=31.31.31.1:40,32.32.32.1:40,33.33.33.1:20", 0, ""},
		{"create lb 2001::1 --tcp=2020:8080 --endpoints=4ffe::1:1,5ffe::1:1 --monitor", 0, ""},
		{"create lb 192.168.0.200 --tcp=443:443 --security=https --mode=fullproxy --backend-protocol=http2 --endpoints=10.212.0.1:1,10.212.0.2:1", 1, ""},
		{"create lb 192.0.2.20 --tcp=8080:8000 --mode=fullproxy --trace-type=anthropic --endpoints=31.31.31.1:1", 0, ""},
		// loxicmd's classic line: without --mode infergate means fullproxy
		// (the only mode it serves) rather than LoxiLB's L4 default.
		{"create lb 192.168.0.200 --tcp=80:32015 --endpoints=10.212.0.1:1,10.212.0.2:1,10.212.0.3:1", 0, ""},
		{"create lb 192.168.0.201 --tcp=80:32015 --endpoints=10.212.0.1:1 --name=http-service --host=loxilb.io", 0, ""},
		// TLS lines are served.
		{"create lb 192.0.2.21 --tcp=80:32015 --mode=fullproxy --endpoints=10.212.0.1:1 --security=https", 0, ""},
		{"create lb 192.0.2.22 --tcp=80:32015 --mode=fullproxy --endpoints=10.212.0.1:1 --security=e2ehttps --mtls-backend-verify-server --mtls-backend-ca-path=/etc/ca.pem", 0, ""},
		// Accepted by loxicmd, refused by the server as not served.
		{"create lb 192.0.2.22 --tcp=8080:80 --mode=fullproxy --endpoints=10.10.10.1:1 --ppv2en", 1, "serviceArguments.proxyprotocolv2"},
		{"create lb 192.0.2.23 --tcp=80:32015 --mode=fullproxy --endpoints=10.212.0.1:1 --bgp", 1, "serviceArguments.bgp"},
		{"create lb 192.0.2.24 --tcp=80:32015 --mode=fullproxy --endpoints=10.212.0.1:1 --sources=10.10.10.1/32", 1, "allowedSources"},
		{"create lb 192.0.2.25 --tcp=8080-8081:32015 --mode=fullproxy --endpoints=10.212.0.1:1", 1, "serviceArguments.portMax"},
		{"create lb 192.0.2.26 --udp=80:32015 --mode=fullproxy --endpoints=10.212.0.1:1", 1, "serviceArguments.protocol"},
		{"create lb 192.0.2.27 --tcp=80:32015 --mode=fullproxy --endpoints=10.212.0.1:1 --attachEP", 1, "serviceArguments.oper"},
		{"create lb 192.0.2.28 --tcp=8080:8000 --mode=fullproxy --api-key-auth=required --endpoints=31.31.31.1:1", 0, ""},
		{"create lb 192.0.2.29 --tcp=8080:8000 --mode=fullproxy --api-key-auth=sometimes --endpoints=31.31.31.1:1", 1, "serviceArguments.api_key_auth"},
		{"create lb 192.0.2.29 --tcp=8080:8000 --mode=fullproxy --sockmap-mode=both --endpoints=31.31.31.1:1", 1, "serviceArguments.sockMapMode"},
		{"create lb 192.0.2.30 --tcp=8080:8000 --mode=fullproxy --select=chwbl --chwbl-hash-level=4 --endpoints=31.31.31.1:1", 1, "serviceArguments.chwbl_prefix_hash_level"},
		{"create lb 192.0.2.31 --tcp=8080:8000 --mode=fullproxy --backend-protocol=http2 --endpoints=31.31.31.1:1", 1, "serviceArguments.backend_protocol"},
		{"create lb 192.0.2.32 --tcp=8080:8000 --mode=fullproxy --fc-mode=enforce --fc-max-outstanding=64 --endpoints=31.31.31.1:1", 1, "serviceArguments.fc_"},
		{"create lb 192.0.2.33 --tcp=8080:8000 --mode=fullproxy --fc-mode=off --endpoints=31.31.31.1:1", 0, ""},
		// Classic L4 modes: a usage error saying only fullproxy is served.
		{"create lb 192.168.0.200 --tcp=80:32015 --endpoints=10.212.0.1:1 --mode=onearm", 2, ""},
		{"create lb 192.168.0.200 --tcp=80:80 --endpoints=10.212.0.1:1 --mode=dsr --select=hash", 2, ""},
		{"create lb 192.168.0.200 --tcp=80:32015 --endpoints=10.212.0.1:1 --security=bogus --mode=fullproxy", 2, ""},
	}
	ts, _ := realAPI(t)
	for _, tc := range tests {
		t.Run(tc.line, func(t *testing.T) {
			args := append(loxiArgs(t, ts), strings.Fields(tc.line)...)
			res := runEnv(t, cli.Env{}, args...)
			if res.code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", res.code, tc.code, res.stdout, res.stderr)
			}
			if tc.code == 0 && strings.TrimSpace(res.stdout) != "created" {
				t.Errorf("stdout %q, want created", res.stdout)
			}
			if tc.field != "" && !strings.Contains(res.stderr, "field:      "+tc.field) {
				t.Errorf("stderr does not name %s:\n%s", tc.field, res.stderr)
			}
		})
	}
}

// The flags land in the JSON fields loxicmd sends.
func TestLoxicmdFlagMapping(t *testing.T) {
	ts, rs := realAPI(t)
	args := append(loxiArgs(t, ts), strings.Fields("create lb 192.0.2.40 --tcp=8080:8000 --mode=fullproxy --select=chwbl "+
		"--chwbl-hash-level=2 --chwbl-hash-flags=3 --chwbl-cache-salt --monitor --backend-keepalive-interval=30 "+
		"--endpoints=31.31.31.1:1")...)
	if res := runEnv(t, cli.Env{}, args...); res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	sa := rs.List()[0].Rule.ServiceArguments
	if !sa.Monitor || sa.BackendKeepaliveIntervalSec != 30 || sa.CHWBLPrefixHashLevel == nil || *sa.CHWBLPrefixHashLevel != 2 ||
		sa.CHWBLPrefixHashFlags == nil || *sa.CHWBLPrefixHashFlags != 3 || sa.CHWBLEnableCacheSalt == nil || !*sa.CHWBLEnableCacheSalt {
		t.Errorf("stored %+v", sa)
	}
	// --protocol is checked; -p must be a port.
	if res := runEnv(t, cli.Env{}, "--protocol", "ftp", "get", "lb"); res.code != 2 || !strings.Contains(res.stderr, "http or https") {
		t.Errorf("--protocol ftp: exit %d %s", res.code, res.stderr)
	}
}

// save --lb writes LoxiLB's lbconfig.txt; apply --lb re-creates every rule
// from it with all fields, on an empty server.
func TestSaveApplyLB(t *testing.T) {
	ts, _ := realAPI(t)
	lines := []string{
		"create lb 192.0.2.50 --tcp=2020:80 --mode=fullproxy --pd-disagg --kv-exact-mode=1 --endpoints=203.0.113.1:1,203.0.113.2:1 --ep-role=prefill,decode --nixl-port=9001,9002",
		"create lb 192.0.2.51 --tcp=8080:8000 --mode=fullproxy --select=chwbl --chwbl-replication=50 --endpoints=31.31.31.2:1,31.31.31.1:1",
	}
	for _, l := range lines {
		if res := runEnv(t, cli.Env{}, append(loxiArgs(t, ts), strings.Fields(l)...)...); res.code != 0 {
			t.Fatalf("%s: %s", l, res.stderr)
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "lbconfig.txt"), []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if res := runEnv(t, cli.Env{}, append(loxiArgs(t, ts), "save", "--lb", "-c", dir)...); res.code != 0 {
		t.Fatalf("save: %s", res.stderr)
	}
	if bk, _ := os.ReadFile(filepath.Join(dir, "lbconfig.txt.bk")); string(bk) != "old" {
		t.Errorf("previous file not kept as .bk: %q", bk)
	}
	saved, err := os.ReadFile(filepath.Join(dir, "lbconfig.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var doc rules.RuleList
	if err := json.Unmarshal(saved, &doc); err != nil || len(doc.LbAttr) != 2 {
		t.Fatalf("lbconfig.txt is not {\"lbAttr\":[2 rules]}: %v\n%s", err, saved)
	}
	if strings.Contains(string(saved), `"counter"`) {
		t.Errorf("counters not blanked:\n%s", saved)
	}
	fresh, rs := realAPI(t)
	res := runEnv(t, cli.Env{}, append(loxiArgs(t, fresh), "apply", "--lb", filepath.Join(dir, "lbconfig.txt"))...)
	if res.code != 0 || strings.Count(res.stdout, "created") != 2 {
		t.Fatalf("apply --lb: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	got := rs.List()
	if len(got) != 2 || !got[0].Rule.ServiceArguments.PDDisaggMode || got[0].Rule.Endpoints[0].NixlPort == 0 ||
		got[1].Rule.ServiceArguments.CHWBLReplication != 50 {
		t.Errorf("AI fields lost through save/apply --lb: %+v", got)
	}
	// loxicmd's get/delete spellings.
	if res := runEnv(t, cli.Env{}, append(loxiArgs(t, fresh), "get", "lb", "--servName=nope", "-o", "json")...); res.code != 0 || strings.Contains(res.stdout, "192.0.2.5") {
		t.Errorf("get lb --servName: exit %d %s", res.code, res.stdout)
	}
	if res := runEnv(t, cli.Env{}, append(loxiArgs(t, fresh), "delete", "lb", "192.0.2.51", "--tcp=8080", "--bgp")...); res.code != 0 {
		t.Errorf("delete lb --bgp: exit %d %s", res.code, res.stderr)
	}
	if n := len(rs.List()); n != 1 {
		t.Fatalf("%d rules after delete", n)
	}
	// Re-applying is idempotent (the deleted rule comes back).
	res = runEnv(t, cli.Env{}, append(loxiArgs(t, fresh), "apply", "--lb", filepath.Join(dir, "lbconfig.txt"))...)
	if res.code != 0 || strings.Count(res.stdout, "unchanged") != 1 || strings.Count(res.stdout, "created") != 1 {
		t.Errorf("second apply --lb: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
}
