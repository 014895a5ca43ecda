package api_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/api"
	"github.com/infergate/infergate/datapath"
	"github.com/infergate/infergate/internal/testport"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/rules/store"
	"github.com/infergate/infergate/tlsmat/tlstest"
)

// tlsHarness is the API over a real store and a real datapath with a
// certificate root, as the daemon wires them.
func tlsHarness(t *testing.T) (*harness, *tlstest.CA, string) {
	t.Helper()
	ca := tlstest.NewCA(t, "api-test-root")
	root := t.TempDir()
	ca.Issue(t, tlstest.LeafOptions{CommonName: "api.example.com", DNSNames: []string{"api.example.com"}}).
		WriteDir(t, filepath.Join(root, "api.example.com"), ca)
	o := datapath.DefaultOptions()
	o.TLS.CertRoot = root
	o.TLS.StateFile = filepath.Join(t.TempDir(), "sni.json")
	m := metrics.New()
	rt := datapath.NewWithMetrics(o, m, quietLog())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = rt.Close(ctx)
	})
	rs, err := store.Open(store.Options{StateDir: t.TempDir(), Runtime: rt, Log: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Replay(context.Background()); err != nil {
		t.Fatal(err)
	}
	opts := api.DefaultOptions()
	opts.Store, opts.Status, opts.Certs, opts.Metrics, opts.Log = rs, rt, rt.Certs(), m, quietLog()
	srv, err := api.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return &harness{srv: srv, ts: ts, store: rs, metrics: m}, ca, root
}

func tlsRuleBody(port int, host, extra string) []byte {
	return []byte(fmt.Sprintf(`{"serviceArguments":{"externalIP":"127.0.0.1","port":%d,"protocol":"tcp","mode":4,"security":1,"host":%q%s},
	  "endpoints":[{"endpointIP":"127.0.0.1","targetPort":9,"weight":1}]}`, port, host, extra))
}

func TestSNICertificatesAPI(t *testing.T) {
	h, ca, root := tlsHarness(t)
	const sni = "/netlox/v1/sni/certificates"
	other := filepath.Join(t.TempDir(), "other")
	ca.Issue(t, tlstest.LeafOptions{CommonName: "other.example.com"}).WriteDir(t, other, nil)

	wantStatus := func(r response, status int, contains ...string) {
		t.Helper()
		if r.status != status {
			t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
		}
		for _, c := range contains {
			if !strings.Contains(string(r.body), c) {
				t.Fatalf("body lacks %q: %s", c, r.body)
			}
		}
	}
	wantStatus(h.do(t, "GET", sni, nil), 200, `"certificates":[]`, `"totalCertificates":0`)
	wantStatus(h.do(t, "POST", sni, []byte(`{"hostname":"other.example.com","certPath":"`+other+`"}`)), 200, `"message"`)
	wantStatus(h.do(t, "POST", sni, []byte(`{"hostname":"missing.example.com"}`)), 400,
		`"field":"certPath"`, filepath.Join(root, "missing.example.com", "server.crt"), "does not exist")
	wantStatus(h.do(t, "POST", sni, []byte(`{"hostname":"../etc"}`)), 400, `"field":"hostname"`)
	wantStatus(h.do(t, "GET", sni, nil), 200, `"hostname":"other.example.com"`, `"refCount":0`, `"notAfter"`)

	// A rule naming a host takes a reference; the store refuses to drop it.
	port := testport.Free(t)
	wantStatus(h.do(t, "POST", "/netlox/v1/config/loadbalancer", tlsRuleBody(port, "other.example.com", "")), 200)
	wantStatus(h.do(t, "GET", sni, nil), 200, `"refCount":1`)
	wantStatus(h.do(t, "DELETE", sni, []byte(`{"hostname":"other.example.com"}`)), 409)
	status := fmt.Sprintf("/netlox/v1/config/loadbalancer/externalipaddress/127.0.0.1/port/%d/protocol/tcp", port)
	wantStatus(h.do(t, "GET", status+"/status", nil), 200, `"tls":{"security":1,"hostname":"other.example.com"`, `"expiresInSec"`)
	wantStatus(h.do(t, "DELETE", fmt.Sprintf("/netlox/v1/config/loadbalancer/hosturl/other.example.com/externalipaddress/127.0.0.1/port/%d/protocol/tcp", port), nil), 200)
	wantStatus(h.do(t, "DELETE", sni, []byte(`{"hostname":"other.example.com"}`)), 200)
	wantStatus(h.do(t, "DELETE", sni, []byte(`{"hostname":"other.example.com"}`)), 404)
}

func TestTLSRuleRefusedWithNothingLeftBehind(t *testing.T) {
	h, _, _ := tlsHarness(t)
	port := testport.Free(t)
	r := h.do(t, "POST", "/netlox/v1/config/loadbalancer", tlsRuleBody(port, "nope.example.com", ""))
	if r.status != 400 || !strings.Contains(string(r.body), `"field":"serviceArguments.host"`) ||
		!strings.Contains(string(r.body), "nope.example.com/server.crt") {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if all := h.do(t, "GET", "/netlox/v1/config/loadbalancer/all", nil); !strings.Contains(string(all.body), `"lbAttr":[]`) {
		t.Fatalf("a refused rule was stored: %s", all.body)
	}
	// Security stays immutable: a created TLS rule cannot become plaintext.
	ok := h.do(t, "POST", "/netlox/v1/config/loadbalancer", tlsRuleBody(port, "api.example.com", ""))
	if ok.status != 200 {
		t.Fatalf("%d %s", ok.status, ok.body)
	}
	plain := strings.Replace(string(tlsRuleBody(port, "api.example.com", "")), `"security":1`, `"security":0`, 1)
	if r := h.do(t, "POST", "/netlox/v1/config/loadbalancer", []byte(plain)); r.status != 409 ||
		!strings.Contains(string(r.body), "lbrule-exist error: cant modify rule security mode") {
		t.Fatalf("security change: %d %s", r.status, r.body)
	}
}

func TestGETNeverShowsKeyMaterial(t *testing.T) {
	h, _, _ := tlsHarness(t)
	ca := tlstest.NewCA(t, "gw-client")
	leaf := ca.Issue(t, tlstest.LeafOptions{CommonName: "gw", Client: true})
	q := func(s []byte) string { return strings.ReplaceAll(strings.TrimSpace(string(s)), "\n", `\n`) }
	extra := fmt.Sprintf(`,"mtls_backend":{"client_cert_data":"%s","client_key_data":"%s"}`, q(leaf.CertPEM), q(leaf.KeyPEM))
	body := strings.Replace(string(tlsRuleBody(testport.Free(t), "api.example.com", extra)), `"security":1`, `"security":2`, 1)
	if r := h.do(t, "POST", "/netlox/v1/config/loadbalancer", []byte(body)); r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	for _, path := range []string{"/netlox/v1/config/loadbalancer/all"} {
		r := h.do(t, "GET", path, nil)
		if strings.Contains(string(r.body), "PRIVATE KEY") || !strings.Contains(string(r.body), `"client_key_data":"\u003credacted\u003e"`) {
			t.Fatalf("GET %s: %s", path, r.body)
		}
	}
}
