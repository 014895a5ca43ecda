package e2e

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/api"
	"github.com/infergate/infergate/internal/pdfake"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/rules/store"
	"github.com/infergate/infergate/tlsmat/tlstest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
)

// tlsFiles writes a leaf and its key as PEM files in dir.
func tlsFiles(t *testing.T, dir, name string, l *tlstest.Leaf) (cert, key string) {
	t.Helper()
	cert, key = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	tlstest.WriteFile(t, cert, l.CertPEM)
	tlstest.WriteFile(t, key, l.KeyPEM)
	return cert, key
}

// TestTLSDaemon runs the built binary as an operator would: the management
// API over HTTPS with client certificates (CLI --protocol https --cacert
// --cert --key), a security 2 P/D rule applied from a YAML file whose VIP
// certificate comes from the LoxiLB layout under --cert-root, engines
// behind HTTPS with a private CA, and clients over HTTP/1.1 and HTTP/2.
func TestTLSDaemon(t *testing.T) {
	bin := cliBuild(t)
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "e2e-root")
	caPath := filepath.Join(dir, "ca.crt")
	tlstest.WriteFile(t, caPath, ca.CertPEM)
	apiCert, apiKey := tlsFiles(t, dir, "api", ca.Issue(t, tlstest.LeafOptions{CommonName: "infergate-api"}))
	cliCert, cliKey := tlsFiles(t, dir, "cli", ca.Issue(t, tlstest.LeafOptions{CommonName: "operator", Client: true}))
	root := filepath.Join(dir, "cert")
	ca.Issue(t, tlstest.LeafOptions{CommonName: "llm.example.com", DNSNames: []string{"llm.example.com"}}).
		WriteDir(t, filepath.Join(root, "llm.example.com"), ca)

	engineCA := tlstest.NewCA(t, "engine-root")
	engineCAPath := filepath.Join(dir, "engine_ca.crt")
	tlstest.WriteFile(t, engineCAPath, engineCA.CertPEM)
	var eps []string
	for i, role := range []pdfake.Role{pdfake.Prefill, pdfake.Decode} {
		cfg := pdfake.DefaultConfig(pdfake.VLLM, role)
		ip := fmt.Sprintf("127.0.0.%d", 40+i)
		cfg.Addr = ip + ":0"
		cfg.TLS = &tls.Config{Certificates: []tls.Certificate{
			engineCA.Issue(t, tlstest.LeafOptions{CommonName: string(role), IPs: []net.IP{net.ParseIP(ip)}}).TLSCertificate(t)}}
		e, err := pdfake.Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		ep := e.Endpoint()
		eps = append(eps, fmt.Sprintf("    - {endpointIP: %s, targetPort: %d, weight: 1, ep_role: %d}", ep.Addr.Addr(), ep.Addr.Port(), i+1))
	}

	apiClient := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: ca.Pool(), Certificates: []tls.Certificate{mustPair(t, cliCert, cliKey)}}}}
	var d *cliDaemon
	for attempt := 0; attempt < 3 && d == nil; attempt++ {
		var err error
		d, err = cliTryStartTLS(t, bin, filepath.Join(dir, "state"), cliFreePort(t), apiClient,
			"--cert-root", root, "--api-tls-cert", apiCert, "--api-tls-key", apiKey, "--api-tls-client-ca", caPath)
		if err != nil && attempt == 2 {
			t.Fatal(err)
		}
	}
	tlsFlags := []string{"--protocol", "https", "--cacert", caPath, "--cert", cliCert, "--key", cliKey}
	plainURL := strings.Replace(d.URL, "https://", "http://", 1)

	vipPort := cliFreePort(t)
	ruleFile := filepath.Join(dir, "rule.yaml")
	tlstest.WriteFile(t, ruleFile, []byte(fmt.Sprintf(`apiVersion: netlox/v1
kind: Loadbalancer
metadata: {name: llm-pd-tls}
spec:
  serviceArguments:
    externalIP: 127.0.0.1
    port: %d
    protocol: tcp
    mode: 4
    security: 2
    name: llm-pd-tls
    host: llm.example.com
    sse_mode: true
    pd_disagg_mode: true
    kvEngineType: vllm
    hsts_max_age: 600
    alpn_protocols: [h2, http/1.1]
    mtls_backend: {backend_ca_path: %s}
  endpoints:
%s
`, vipPort, engineCAPath, strings.Join(eps, "\n"))))

	t.Run("CLI needs the client certificate", func(t *testing.T) {
		if res := cliRun(t, bin, plainURL, "--protocol", "https", "--cacert", caPath, "get", "lb"); res.Code == 0 {
			t.Fatalf("CLI without --cert reached an mTLS API: %s", res.Stdout)
		}
	})
	t.Run("apply over HTTPS", func(t *testing.T) {
		out := cliMust(t, bin, plainURL, append(tlsFlags, "apply", "-f", ruleFile)...)
		if !strings.Contains(out, "created") {
			t.Fatalf("apply: %s", out)
		}
		js := cliMust(t, bin, plainURL, append(tlsFlags, "get", "lb", "-o", "json")...)
		for _, want := range []string{`"security": 2`, `"backend_ca_path"`, `"hsts_max_age": 600`} {
			if !strings.Contains(js, want) {
				t.Errorf("get lb -o json lacks %s:\n%s", want, js)
			}
		}
	})
	vip := fmt.Sprintf("127.0.0.1:%d", vipPort)
	for _, h2 := range []bool{false, true} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("client h2=%v stream=%v", h2, stream), func(t *testing.T) {
				tr := &http.Transport{ForceAttemptHTTP2: h2, TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), ServerName: "llm.example.com"}}
				if !h2 {
					tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
				}
				c := &http.Client{Timeout: 10 * time.Second, Transport: tr}
				body := fmt.Sprintf(`{"model":"fake-model","prompt":"hello","max_tokens":3,"stream":%v}`, stream)
				req, _ := http.NewRequest(http.MethodPost, "https://"+vip+"/v1/completions", strings.NewReader(body))
				req.Host = "llm.example.com"
				req.Header.Set("Content-Type", "application/json")
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || (stream && !strings.Contains(string(b), "[DONE]")) {
					t.Fatalf("%d %s", resp.StatusCode, b)
				}
				if (resp.ProtoMajor == 2) != h2 || resp.Header.Get("Strict-Transport-Security") != "max-age=600" {
					t.Errorf("proto %s, HSTS %q", resp.Proto, resp.Header.Get("Strict-Transport-Security"))
				}
			})
		}
	}
	t.Run("validate speaks HTTPS to the VIP and the engines", func(t *testing.T) {
		res := cliRun(t, bin, plainURL, append(tlsFlags, "validate", "llm-pd-tls")...)
		if res.Code != 0 {
			t.Fatalf("validate: exit %d\n%s\n%s", res.Code, res.Stdout, res.Stderr)
		}
	})
	t.Run("status and SNI list show the certificate, metrics count handshakes", func(t *testing.T) {
		get := func(path string) string {
			resp, err := apiClient.Get(d.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return string(b)
		}
		st := get(fmt.Sprintf("/netlox/v1/config/loadbalancer/externalipaddress/127.0.0.1/port/%d/protocol/tcp/status", vipPort))
		if !strings.Contains(st, `"hostname":"llm.example.com"`) || !strings.Contains(st, `"expiresInSec"`) {
			t.Errorf("status: %s", st)
		}
		if sni := get("/netlox/v1/sni/certificates"); !strings.Contains(sni, `"refCount":1`) {
			t.Errorf("sni: %s", sni)
		}
		m := get("/metrics")
		for _, want := range []string{`infergate_tls_handshakes_total{listener="` + vip + `",result="ok"`,
			`infergate_tls_backend_handshakes_total{result="ok"}`, `infergate_tls_cert_expiry_seconds{hostname="llm.example.com"}`} {
			if !strings.Contains(m, want) {
				t.Errorf("metrics lack %s", want)
			}
		}
	})
}

func mustPair(t *testing.T, cert, key string) tls.Certificate {
	t.Helper()
	p, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSwaggerUIOverHTTPS renders Swagger UI from a management API served
// over TLS in headless chromium, which trusts exactly that certificate's key
// (SPKI pin), and checks the document's operations render: the document
// names no scheme, so the UI talks HTTPS back to the page's origin.
func TestSwaggerUIOverHTTPS(t *testing.T) {
	browser := requireChromium(t)
	log := logrus.New()
	log.SetOutput(io.Discard)
	rs, err := store.Open(store.Options{StateDir: t.TempDir(), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Replay(context.Background()); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	opts := api.DefaultOptions()
	opts.Store = rs
	opts.Metrics = &metrics.Metrics{Registry: reg, API: metrics.NewAPI(reg)}
	opts.Log = log
	srv, err := api.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ca := tlstest.NewCA(t, "ui-root")
	leaf := ca.Issue(t, tlstest.LeafOptions{CommonName: "infergate-api"})
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{leaf.TLSCertificate(t)}})
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
		<-done
	})
	spki := sha256.Sum256(leaf.Cert.RawSubjectPublicKeyInfo)
	dom := dumpDOMWith(t, browser, "https://"+ln.Addr().String()+"/netlox/v1/docs",
		"--ignore-certificate-errors-spki-list="+base64.StdEncoding.EncodeToString(spki[:]))
	for _, want := range []string{`class="swagger-ui"`, "infergate management API", "opblock-post", "/sni/certificates", "LoadbalanceEntry"} {
		if !strings.Contains(dom, want) {
			t.Errorf("rendered DOM over HTTPS lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("DOM (first 3000 bytes):\n%.3000s", dom)
	}
}
