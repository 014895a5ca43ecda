package daemon

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/epp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"gopkg.in/yaml.v3"
)

// TestCheckEPP: the EPP is off by default and its options are checked before
// the daemon builds anything.
func TestCheckEPP(t *testing.T) {
	cases := []struct {
		name string
		mod  func(*Options)
		want string // "" = accepted
	}{
		{"off by default", func(*Options) {}, ""},
		{"on with a rule", func(o *Options) { o.EPP.Addr, o.EPPRule = ":9002", "pool" }, ""},
		{"no rule", func(o *Options) { o.EPP.Addr = ":9002" }, "--epp-rule is required"},
		{"same ports", func(o *Options) { o.EPP.Addr, o.EPP.HealthAddr, o.EPPRule = ":9002", ":9002", "pool" }, "health_addr"},
		{"no body room", func(o *Options) { o.EPP.Addr, o.EPPRule, o.EPP.MaxBodyBytes = ":9002", "pool", 0 }, "max_body_bytes"},
	}
	for _, tc := range cases {
		o := DefaultOptions()
		tc.mod(&o)
		err := checkEPP(o)
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
	if d := DefaultOptions(); d.EPP.Addr != "" || d.EPP.HealthAddr != epp.DefaultHealthAddr {
		t.Errorf("default EPP addresses %q/%q, want off and %s", d.EPP.Addr, d.EPP.HealthAddr, epp.DefaultHealthAddr)
	}
}

func loopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestEPPDaemon: with --epp-addr the daemon serves the picker; its readiness
// follows the pool rule's existence (created and deleted over the API), its
// families are on /metrics, and shutdown closes its ports.
func TestEPPDaemon(t *testing.T) {
	log, _ := testLogger()
	opts := DefaultOptions()
	opts.StateDir = filepath.Join(t.TempDir(), "state")
	opts.EPP.Addr, opts.EPP.HealthAddr, opts.EPPRule = loopbackAddr(t), loopbackAddr(t), "persisted"
	d := start(t, opts, log)

	cc, err := grpc.NewClient(opts.EPP.HealthAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	health := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		r, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			return healthpb.HealthCheckResponse_UNKNOWN
		}
		return r.GetStatus()
	}
	waitHealth := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		for range 100 { // ≤ 5 s
			if health(epp.HealthReadiness) == want {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("readiness never became %s", want)
	}
	if got := health(epp.HealthLiveness); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("liveness %s, want SERVING", got)
	}
	waitHealth(healthpb.HealthCheckResponse_NOT_SERVING) // no rule "persisted" yet

	createPersisted(t, d.base)
	waitHealth(healthpb.HealthCheckResponse_SERVING)

	req, _ := http.NewRequest(http.MethodDelete, d.base+"/netlox/v1/config/loadbalancer/name/persisted", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("delete rule: %d", resp.StatusCode)
	}
	waitHealth(healthpb.HealthCheckResponse_NOT_SERVING)

	resp, err = http.Get(d.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "infergate_epp_active_streams") {
		t.Errorf("/metrics lacks the EPP families")
	}

	if err := d.stop(); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{opts.EPP.Addr, opts.EPP.HealthAddr} {
		if c, err := net.DialTimeout("tcp", a, time.Second); err == nil {
			c.Close()
			t.Errorf("%s still accepts connections after shutdown", a)
		}
	}
}

// TestEPPOptionsYAML: the EPP's options map onto yaml under their flag names.
func TestEPPOptionsYAML(t *testing.T) {
	got := DefaultOptions()
	doc := "epp-addr: :9002\nepp-health-addr: :9003\nepp-rule: pool\nepp-max-endpoints: 1\nepp-drain-timeout: 3s\n"
	if err := yaml.Unmarshal([]byte(doc), &got); err != nil {
		t.Fatal(err)
	}
	want := DefaultOptions()
	want.EPP.Addr, want.EPP.HealthAddr, want.EPPRule = ":9002", ":9003", "pool"
	want.EPP.MaxEndpoints, want.EPP.DrainTimeout = 1, 3*time.Second
	a, _ := yaml.Marshal(got)
	b, _ := yaml.Marshal(want)
	if string(a) != string(b) {
		t.Fatalf("options from yaml:\n%s\nwant:\n%s", a, b)
	}
}
