package datapath

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/internal/fakeengine"
	"github.com/infergate/infergate/internal/pdfake"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/spec"
	"github.com/infergate/infergate/tlsmat"
	"github.com/infergate/infergate/tlsmat/tlstest"
	"github.com/prometheus/client_golang/prometheus"
)

// tlsEnv is a certificate root with a default certificate and one per
// hostname, all from one runtime-made CA.
type tlsEnv struct {
	ca   *tlstest.CA
	root string
	reg  *prometheus.Registry
	rt   *Runtime
}

func newTLSEnv(t *testing.T, hosts ...string) *tlsEnv {
	t.Helper()
	e := &tlsEnv{ca: tlstest.NewCA(t, "infergate-test-root"), root: t.TempDir()}
	e.ca.Issue(t, tlstest.LeafOptions{CommonName: "default-cert"}).WriteDir(t, e.root, nil)
	for _, h := range hosts {
		e.ca.Issue(t, tlstest.LeafOptions{CommonName: h, DNSNames: []string{h}}).WriteDir(t, filepath.Join(e.root, h), e.ca)
	}
	o := testOptions()
	o.TLS.CertRoot = e.root
	// Long enough that a rotation's two file writes land within one poll even
	// on a loaded machine (the rotation test counts exactly one reload).
	o.TLS.ReloadInterval = 100 * time.Millisecond
	// The suite's clients open a connection per request on loopback: on a
	// quiet machine that is over the per-source handshake bound, which has
	// its own tests in tlsmat (handshakerate_test.go).
	o.TLS.HandshakesPerIP = 0
	m := metrics.New()
	e.reg = m.Registry
	e.rt = NewWithMetrics(o, m, nil)
	closeAtEnd(t, e.rt)
	return e
}

// tlsRule is a security 1 rule on 127.0.0.1:port with host (cert name).
func tlsRule(port uint16, host string, eps ...spec.Endpoint) *spec.Rule {
	r := newRule("127.0.0.1", port, spec.SelRoundRobin, eps...)
	r.Key.Host = host
	r.Name = "tls-" + host
	r.TLS = &spec.TLS{Security: spec.SecurityTerminate, Server: tlsmat.ServerParams{
		CertHost: host, MinVersion: tls.VersionTLS12, MaxVersion: tls.VersionTLS13,
		ALPN: []string{"h2", "http/1.1"}, HSTS: "max-age=600",
	}}
	return r
}

// client trusts the env CA; h2 selects HTTP/2 via ALPN.
func (e *tlsEnv) client(serverName string, h2 bool, certs ...tls.Certificate) *http.Client {
	cfg := &tls.Config{RootCAs: e.ca.Pool(), ServerName: serverName}
	if len(certs) > 0 {
		// Always present the certificate, even one the server's CA list
		// does not name (crypto/tls would otherwise send none).
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &certs[0], nil }
	}
	tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: h2, DisableCompression: true}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: tr}
}

func httpsURL(r *spec.Rule, path string) string {
	return "https://" + r.Key.ListenAddr().String() + path
}

func TestTLSTerminateSNIAndHTTP2(t *testing.T) {
	env := newTLSEnv(t, "api.example.com")
	eng := startEngine(t, "e1")
	port := freePort(t)
	def := tlsRule(port, "", epFor(t, eng.Addr(), 1))
	api := tlsRule(port, "api.example.com", epFor(t, eng.Addr(), 1))
	for _, r := range []*spec.Rule{def, api} {
		if err := env.rt.Install(nil, r); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name, sni, wantCN string
		h2                bool
	}{
		{"default h1", "localhost", "default-cert", false},
		{"default h2", "localhost", "default-cert", true},
		{"sni h1", "api.example.com", "api.example.com", false},
		{"sni h2", "api.example.com", "api.example.com", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := env.client(tc.sni, tc.h2)
			for _, stream := range []bool{false, true} {
				body := fmt.Sprintf(`{"model":"fake-model","prompt":"hi","max_tokens":3,"stream":%v}`, stream)
				req, _ := http.NewRequest(http.MethodPost, httpsURL(def, "/v1/completions"), strings.NewReader(body))
				req.Host = tc.sni
				req.Header.Set(HeaderRequestID, "tls-req-1")
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Fatalf("status %d: %s", resp.StatusCode, b)
				}
				if got := resp.TLS.PeerCertificates[0].Subject.CommonName; got != tc.wantCN {
					t.Errorf("certificate CN = %q, want %q", got, tc.wantCN)
				}
				if wantMajor := map[bool]int{true: 2, false: 1}[tc.h2]; resp.ProtoMajor != wantMajor {
					t.Errorf("proto = %s, want HTTP/%d", resp.Proto, wantMajor)
				}
				if resp.Header.Get("Strict-Transport-Security") != "max-age=600" {
					t.Errorf("HSTS = %q", resp.Header.Get("Strict-Transport-Security"))
				}
				if resp.Header.Get(HeaderRequestID) != "tls-req-1" {
					t.Errorf("request id = %q", resp.Header.Get(HeaderRequestID))
				}
				if stream && !strings.Contains(string(b), "data: [DONE]") {
					t.Errorf("stream body %q", b)
				}
			}
			// A gateway error body is the same JSON over HTTP/2, with HSTS.
			req, _ := http.NewRequest(http.MethodGet, httpsURL(def, "/v1/models/../admin"), nil) // refused: invalid_path
			req.Host = tc.sni
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || errorCode(t, string(b)) != CodeInvalidPath || resp.Header.Get("Strict-Transport-Security") == "" {
				t.Errorf("gateway error answer %d %s %v", resp.StatusCode, b, resp.Header)
			}
		})
	}
	if got := counterSum(t, env.reg, "infergate_tls_handshakes_total", map[string]string{"result": "ok"}); got < 4 {
		t.Errorf("ok handshakes = %v, want ≥ 4", got)
	}
	// A plaintext rule cannot join a TLS VIP:port.
	plain := newRule("127.0.0.1", port, spec.SelRoundRobin, epFor(t, eng.Addr(), 1))
	plain.Key.Host = "plain.example.com"
	if err := env.rt.Install(nil, plain); err == nil {
		t.Fatal("plaintext rule installed on a TLS listener")
	}
}

func TestTLSHTTP2CancelReachesEngine(t *testing.T) {
	env := newTLSEnv(t)
	eng := startEngine(t, "slow", func(o *fakeengine.Options) { o.Tokens = 200; o.TokenDelay = 20 * time.Millisecond })
	r := tlsRule(freePort(t), "", epFor(t, eng.Addr(), 1))
	r.SSE = true
	if err := env.rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	c := env.client("localhost", true)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, httpsURL(r, "/v1/completions"),
		strings.NewReader(`{"model":"fake-model","prompt":"hi","stream":true}`))
	req.Header.Set(HeaderRequestID, "h2-cancel")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.ProtoMajor != 2 {
		t.Fatalf("proto %s", resp.Proto)
	}
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel() // RST_STREAM
	resp.Body.Close()
	select {
	case id := <-eng.ClientGone():
		if id != "h2-cancel" {
			t.Errorf("engine saw %q go away", id)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("engine never saw the client go away after RST_STREAM")
	}
}

func TestTLSRefusesBadMaterialAtInstall(t *testing.T) {
	env := newTLSEnv(t)
	eng := startEngine(t, "e1")
	port := freePort(t)
	expired := env.ca.Issue(t, tlstest.LeafOptions{NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	expired.WriteDir(t, filepath.Join(env.root, "old.example.com"), nil)
	for _, tc := range []struct {
		name, host, field, want string
		mod                     func(*spec.Rule)
	}{
		{"missing dir", "nope.example.com", "serviceArguments.host", "nope.example.com", nil},
		{"expired", "old.example.com", "serviceArguments.host", "expired", nil},
		{"client CA missing", "", "serviceArguments.mtls_frontend.client_ca_path", "does not exist", func(r *spec.Rule) {
			r.TLS.Server.Client = &tlsmat.ClientAuth{Mode: "required", CAPath: filepath.Join(env.root, "none.crt")}
		}},
		{"backend CA empty", "", "serviceArguments.mtls_backend.backend_ca_path", "holds no certificate", func(r *spec.Rule) {
			p := filepath.Join(t.TempDir(), "empty.crt")
			_ = os.WriteFile(p, []byte("\n"), 0o600)
			r.TLS.Security = spec.SecurityEndToEnd
			r.TLS.Backend = &tlsmat.ClientParams{Verify: true, CAPath: p}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tlsRule(port, tc.host, epFor(t, eng.Addr(), 1))
			if tc.mod != nil {
				tc.mod(r)
			}
			err := env.rt.Install(nil, r)
			ae, ok := apierror.As(err)
			if !ok || ae.Status != 400 || ae.Field != tc.field || !strings.Contains(ae.Message, tc.want) {
				t.Fatalf("Install = %v, want 400 at %s naming %q", err, tc.field, tc.want)
			}
			if strings.Contains(tc.name, "dir") && !strings.Contains(ae.Message, "server.crt") {
				t.Errorf("message does not name the file: %s", ae.Message)
			}
			// Nothing left behind: the port is free and the store holds no reference.
			l, lerr := net.Listen("tcp", r.Key.ListenAddr().String())
			if lerr != nil {
				t.Fatalf("port still bound after refused install: %v", lerr)
			}
			l.Close()
			for _, c := range env.rt.Certs().List() {
				if c.RefCount != 0 {
					t.Errorf("certificate %s still referenced %d times", c.Hostname, c.RefCount)
				}
			}
		})
	}
}

// TestTLSRotationUnderLoad rotates the served certificate while clients
// keep making new connections and keep-alive requests: no request fails,
// new handshakes see the new certificate, and an invalid new file keeps the
// old one serving and is counted.
func TestTLSRotationUnderLoad(t *testing.T) {
	env := newTLSEnv(t)
	eng := startEngine(t, "e1", func(o *fakeengine.Options) { o.NoLog = true })
	r := tlsRule(freePort(t), "", epFor(t, eng.Addr(), 1))
	if err := env.rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	serial := func() string {
		conn, err := tls.Dial("tcp", r.Key.ListenAddr().String(), &tls.Config{RootCAs: env.ca.Pool(), ServerName: "localhost"})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	first := serial()
	var failures, done atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := env.client("localhost", i%2 == 0)
			if i >= 2 { // new connection (new handshake) per request
				c.Transport.(*http.Transport).DisableKeepAlives = true
			}
			for n := 0; n < 2000; n++ {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := c.Post(httpsURL(r, "/v1/completions"), "application/json", strings.NewReader(completionBody))
				if err != nil {
					failures.Add(1)
					t.Logf("request failed: %v", err)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					failures.Add(1)
				}
				done.Add(1)
			}
		}()
	}
	waitFor(t, 5*time.Second, "load to start", func() bool { return done.Load() > 20 })
	env.ca.Issue(t, tlstest.LeafOptions{CommonName: "rotated"}).WriteDir(t, env.root, nil)
	waitFor(t, 5*time.Second, "the rotated certificate to serve", func() bool { return serial() != first })
	rotated := serial()
	before := done.Load()
	waitFor(t, 5*time.Second, "load after rotation", func() bool { return done.Load() > before+20 })
	// A broken new version keeps the rotated certificate.
	tlstest.WriteFile(t, filepath.Join(env.root, tlsmat.KeyFile), []byte("-----BEGIN PRIVATE KEY-----\ngarbage\n-----END PRIVATE KEY-----\n"))
	waitFor(t, 5*time.Second, "the reload failure to be counted", func() bool {
		return counterSum(t, env.reg, "infergate_tls_cert_reload_failures_total", map[string]string{"hostname": "default"}) >= 1
	})
	before = done.Load()
	waitFor(t, 5*time.Second, "load after the failed reload", func() bool { return done.Load() > before+20 })
	close(stop)
	wg.Wait()
	if got := serial(); got != rotated {
		t.Errorf("serial after a failed reload = %s, want the rotated %s", got, rotated)
	}
	if f := failures.Load(); f != 0 {
		t.Fatalf("%d of %d requests failed during rotation", f, done.Load())
	}
	if got := counterSum(t, env.reg, "infergate_tls_cert_reloads_total", map[string]string{"hostname": "default"}); got != 1 {
		t.Errorf("reloads = %v, want 1", got)
	}
}

// hostileClients send what a TLS listener must survive.
var hostileClients = map[string][]byte{
	"plaintext http": []byte("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"),
	"garbage":        []byte("\x16\x03\x01\xff\xff\x00\x00garbage-garbage-garbage"),
	"ssl2 hello":     {0x80, 0x2e, 0x01, 0x00, 0x02, 0x00, 0x15, 0x00, 0x00, 0x00, 0x10},
	"empty record":   {0x16, 0x03, 0x01, 0x00, 0x00},
}

// clientHello captures a real ClientHello's bytes (for truncation cases).
func clientHello(t testing.TB, serverName string, alpn ...string) []byte {
	t.Helper()
	a, b := net.Pipe()
	go func() {
		c := tls.Client(a, &tls.Config{ServerName: serverName, NextProtos: alpn, InsecureSkipVerify: true}) //nolint:gosec // never completes
		_ = c.Handshake()
	}()
	buf := make([]byte, 4096)
	_ = b.SetReadDeadline(time.Now().Add(2 * time.Second))
	n, _ := b.Read(buf)
	a.Close()
	b.Close()
	return buf[:n]
}

func sendRaw(addr string, data []byte) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	_, _ = c.Write(data)
	_, _ = io.Copy(io.Discard, c)
}

func TestTLSHostileHandshakesKeepListenerServing(t *testing.T) {
	env := newTLSEnv(t, "api.example.com")
	eng := startEngine(t, "e1")
	r := tlsRule(freePort(t), "api.example.com", epFor(t, eng.Addr(), 1)) // no default site on this listener
	if err := env.rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	addr := r.Key.ListenAddr().String()
	hello := clientHello(t, "api.example.com", "h2")
	cases := map[string][]byte{}
	for k, v := range hostileClients {
		cases[k] = v
	}
	for _, cut := range []int{1, 5, 9, len(hello) / 2, len(hello) - 1} {
		cases[fmt.Sprintf("hello truncated at %d", cut)] = hello[:cut]
	}
	for name, data := range cases {
		sendRaw(addr, data)
		t.Logf("sent %s", name)
	}
	// Plaintext HTTP gets net/http's clear answer, not silence.
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		_, _ = c.Write(hostileClients["plaintext http"])
		b, _ := io.ReadAll(c)
		c.Close()
		if !strings.Contains(string(b), "HTTP request to an HTTPS server") {
			t.Errorf("plaintext client got %q", b)
		}
	}
	// Unknown ALPN and a mismatched version get a clean failure.
	for name, cfg := range map[string]*tls.Config{
		"unknown alpn": {RootCAs: env.ca.Pool(), ServerName: "api.example.com", NextProtos: []string{"h3"}},
		"tls 1.1 only": {RootCAs: env.ca.Pool(), ServerName: "api.example.com", MaxVersion: tls.VersionTLS11},
		"wrong trust":  {RootCAs: x509.NewCertPool(), ServerName: "api.example.com"},
	} {
		c, err := tls.Dial("tcp", addr, cfg)
		if err == nil {
			c.Close()
			t.Errorf("%s: handshake succeeded", name)
		}
	}
	// A good client is still served.
	c := env.client("api.example.com", true)
	req, _ := http.NewRequest(http.MethodPost, httpsURL(r, "/v1/completions"), strings.NewReader(completionBody))
	req.Host = "api.example.com"
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d after hostile clients", resp.StatusCode)
	}
	waitFor(t, 5*time.Second, "failed handshakes to be counted", func() bool {
		return counterSum(t, env.reg, "infergate_tls_handshakes_total", map[string]string{"result": "failed"}) >= float64(len(cases))
	})
}

// FuzzTLSHandshake feeds arbitrary first bytes to a TLS VIP; the listener
// must keep answering a good client afterwards.
func FuzzTLSHandshake(f *testing.F) {
	for _, v := range hostileClients {
		f.Add(v)
	}
	hello := clientHello(f, "localhost", "h2", "http/1.1")
	f.Add(hello)
	f.Add(hello[:len(hello)/3])
	env := newTLSEnvFuzz(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		sendRaw(env.addr, data)
		resp, err := env.client.Post("https://"+env.addr+"/v1/completions", "application/json", strings.NewReader(completionBody))
		if err != nil {
			t.Fatalf("good client after %q: %v", data, err)
		}
		resp.Body.Close()
	})
}

type fuzzEnv struct {
	addr   string
	client *http.Client
}

func newTLSEnvFuzz(f *testing.F) *fuzzEnv {
	ca := tlstest.NewCA(f, "fuzz-root")
	root := f.TempDir()
	ca.Issue(f, tlstest.LeafOptions{}).WriteDir(f, root, nil)
	o := testOptions()
	o.TLS.CertRoot = root
	rt := New(o, nil, nil)
	f.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Close(ctx)
	})
	eng, err := fakeengine.Start(fakeengine.Options{Name: "fuzz", NoLog: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(eng.Close)
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	ap := mustAddrPort(eng.Addr())
	r := tlsRule(port, "", spec.Endpoint{ID: ap.String(), Addr: ap, Weight: 1})
	if err := rt.Install(nil, r); err != nil {
		f.Fatal(err)
	}
	return &fuzzEnv{addr: r.Key.ListenAddr().String(), client: &http.Client{Timeout: 5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"}, ForceAttemptHTTP2: true}}}
}

func TestTLSClientCertificates(t *testing.T) {
	env := newTLSEnv(t)
	clientCA := tlstest.NewCA(t, "client-root")
	wrongCA := tlstest.NewCA(t, "wrong-root")
	good := clientCA.Issue(t, tlstest.LeafOptions{CommonName: "svc.internal.corp", DNSNames: []string{"svc.internal.corp"}, Client: true})
	revoked := clientCA.Issue(t, tlstest.LeafOptions{CommonName: "old.internal.corp", Client: true})
	outsider := clientCA.Issue(t, tlstest.LeafOptions{CommonName: "laptop.example.com", Client: true})
	stranger := wrongCA.Issue(t, tlstest.LeafOptions{CommonName: "svc.internal.corp", Client: true})
	dir := t.TempDir()
	caPath, crlPath := filepath.Join(dir, "client_ca.crt"), filepath.Join(dir, "client.crl")
	tlstest.WriteFile(t, caPath, clientCA.CertPEM)
	tlstest.WriteFile(t, crlPath, clientCA.CRL(t, revoked))
	eng := startEngine(t, "e1")
	for _, mode := range []string{"required", "optional"} {
		t.Run(mode, func(t *testing.T) {
			r := tlsRule(freePort(t), "", epFor(t, eng.Addr(), 1))
			r.TLS.Server.Client = &tlsmat.ClientAuth{Mode: mode, CAPath: caPath, CRLPath: crlPath, RequireCN: true, CNPattern: "*.internal.corp"}
			if err := env.rt.Install(nil, r); err != nil {
				t.Fatal(err)
			}
			served := eng.Served()
			for _, tc := range []struct {
				name string
				cert []tls.Certificate
				ok   bool
			}{
				{"good", []tls.Certificate{good.TLSCertificate(t)}, true},
				{"missing", nil, mode == "optional"},
				{"wrong CA", []tls.Certificate{stranger.TLSCertificate(t)}, false},
				{"revoked", []tls.Certificate{revoked.TLSCertificate(t)}, false},
				{"CN mismatch", []tls.Certificate{outsider.TLSCertificate(t)}, false},
			} {
				c := env.client("localhost", true, tc.cert...)
				resp, err := c.Post(httpsURL(r, "/v1/completions"), "application/json", strings.NewReader(completionBody))
				if tc.ok {
					if err != nil {
						t.Errorf("%s: %v", tc.name, err)
						continue
					}
					resp.Body.Close()
					served++
					continue
				}
				if err == nil {
					resp.Body.Close()
					t.Errorf("%s: request was served (status %d)", tc.name, resp.StatusCode)
				}
			}
			if got := eng.Served(); got != served {
				t.Errorf("engine served %d, want %d: a rejected client reached it", got, served)
			}
			waitFor(t, 5*time.Second, "client_cert_rejected", func() bool {
				return counterSum(t, env.reg, "infergate_tls_handshakes_total",
					map[string]string{"result": "client_cert_rejected", "listener": r.Key.ListenAddr().String()}) >= 3
			})
		})
	}
}

// tlsEngineConfig is an engine's server config from ca, optionally
// requiring client certificates from clientCA.
func tlsEngineConfig(t *testing.T, ca *tlstest.CA, clientCA *tlstest.CA) *tls.Config {
	leaf := ca.Issue(t, tlstest.LeafOptions{CommonName: "engine"})
	cfg := &tls.Config{Certificates: []tls.Certificate{leaf.TLSCertificate(t)}}
	if clientCA != nil {
		cfg.ClientCAs = clientCA.Pool()
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg
}

func TestTLSToEngines(t *testing.T) {
	env := newTLSEnv(t)
	engineCA := tlstest.NewCA(t, "engine-root")
	gwCA := tlstest.NewCA(t, "gateway-client-root")
	otherCA := tlstest.NewCA(t, "other-root")
	dir := t.TempDir()
	engineCAPath, otherCAPath := filepath.Join(dir, "engine_ca.crt"), filepath.Join(dir, "other_ca.crt")
	tlstest.WriteFile(t, engineCAPath, engineCA.CertPEM)
	tlstest.WriteFile(t, otherCAPath, otherCA.CertPEM)
	gwLeaf := gwCA.Issue(t, tlstest.LeafOptions{CommonName: "gateway", Client: true})
	eng := startEngine(t, "tls-engine", func(o *fakeengine.Options) { o.TLS = tlsEngineConfig(t, engineCA, gwCA) })
	for _, tc := range []struct {
		name   string
		params tlsmat.ClientParams
		want   int
	}{
		{"private CA with client cert", tlsmat.ClientParams{Verify: true, CAPath: engineCAPath, CertData: string(gwLeaf.CertPEM), KeyData: tlsmat.Secret(gwLeaf.KeyPEM)}, 200},
		{"wrong CA", tlsmat.ClientParams{Verify: true, CAPath: otherCAPath, CertData: string(gwLeaf.CertPEM), KeyData: tlsmat.Secret(gwLeaf.KeyPEM)}, 502},
		{"no verify", tlsmat.ClientParams{Verify: false, CAPath: otherCAPath, CertData: string(gwLeaf.CertPEM), KeyData: tlsmat.Secret(gwLeaf.KeyPEM)}, 200},
		{"no client cert", tlsmat.ClientParams{Verify: true, CAPath: engineCAPath}, 502},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tlsRule(freePort(t), "", epFor(t, eng.Addr(), 1))
			r.TLS.Security = spec.SecurityEndToEnd
			p := tc.params
			r.TLS.Backend = &p
			r.Probe = spec.Probe{Type: "https", Request: "/health", Timeout: time.Second, Retries: 1}
			if tc.want != 200 {
				r.Probe = spec.Probe{Type: "none"} // reach the engine handshake, not the probe's
			}
			if err := env.rt.Install(nil, r); err != nil {
				t.Fatal(err)
			}
			if tc.want == 200 {
				waitFor(t, 5*time.Second, "the https probe to pass with the rule's trust", func() bool {
					st, _ := env.rt.Status(r.Key)
					return st.Endpoints[eng.Addr()].State == "active"
				})
			}
			c := env.client("localhost", false)
			for _, stream := range []bool{false, true} {
				body := fmt.Sprintf(`{"model":"fake-model","prompt":"hi","max_tokens":3,"stream":%v}`, stream)
				for range 3 { // pooled TLS connections are reused
					resp, err := c.Post(httpsURL(r, "/v1/completions"), "application/json", strings.NewReader(body))
					if err != nil {
						t.Fatal(err)
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != tc.want && !(tc.want == 502 && resp.StatusCode >= 500) {
						t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.want, b)
					}
				}
			}
		})
	}
	if got := counterSum(t, env.reg, "infergate_tls_backend_handshakes_total", map[string]string{"result": "failed"}); got == 0 {
		t.Error("failed engine handshakes not counted")
	}
}

// TestTLSPDLegs runs every P/D dialect with HTTPS engines (security 2):
// both legs go over TLS with the rule's private CA.
func TestTLSPDLegs(t *testing.T) {
	for _, engine := range []spec.Engine{spec.EngineVLLM, spec.EngineSGLang, spec.EngineTRTLLM} {
		t.Run(string(engine), func(t *testing.T) {
			env := newTLSEnv(t)
			engineCA := tlstest.NewCA(t, "engine-root")
			caPath := filepath.Join(t.TempDir(), "engine_ca.crt")
			tlstest.WriteFile(t, caPath, engineCA.CertPEM)
			d := pdFakeDialect(engine)
			start := func(role pdfake.Role, addr string, boot uint16) *pdfake.Engine {
				cfg := pdfake.DefaultConfig(d, role)
				cfg.Addr, cfg.BootstrapPort = addr, boot
				cfg.RendezvousTimeout = 10 * time.Second
				cfg.StreamChunks = 3
				host, _, _ := net.SplitHostPort(addr)
				leaf := engineCA.Issue(t, tlstest.LeafOptions{CommonName: string(role), IPs: []net.IP{net.ParseIP(host)}})
				cfg.TLS = &tls.Config{Certificates: []tls.Certificate{leaf.TLSCertificate(t)}}
				e, err := pdfake.Start(cfg)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = e.Close() })
				return e
			}
			pre := start(pdfake.Prefill, "127.0.0.20:0", 0)
			dec := start(pdfake.Decode, "127.0.0.30:0", 0)
			r := tlsRule(freePort(t), "", pre.Endpoint(), dec.Endpoint())
			r.TLS.Security = spec.SecurityEndToEnd
			r.TLS.Backend = &tlsmat.ClientParams{Verify: true, CAPath: caPath}
			r.Engine = engine
			r.PD = &spec.PD{SessionTTL: time.Minute, BootstrapPort: pre.BootstrapPort(), BalanceAbsThreshold: 3, CacheThreshold: 20}
			if err := env.rt.Install(nil, r); err != nil {
				t.Fatal(err)
			}
			for _, h2 := range []bool{false, true} {
				c := env.client("localhost", h2)
				for _, stream := range []bool{false, true} {
					resp, err := c.Post(httpsURL(r, pathCompletions), "application/json", strings.NewReader(pdBody(pathCompletions, stream, "")))
					if err != nil {
						t.Fatal(err)
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						t.Fatalf("h2=%v stream=%v: %d %s", h2, stream, resp.StatusCode, b)
					}
				}
			}
			pm, dm := legMarkers(engine)
			for role, es := range map[string]*pdfake.Engine{"prefill": pre, "decode": dec} {
				recs := es.Records()
				if len(recs) == 0 {
					t.Fatalf("%s got no leg over TLS", role)
				}
				marker := pm
				if role == "decode" {
					marker = dm
				}
				for _, rec := range recs {
					if rec.Violation != "" || !strings.Contains(string(rec.Body), marker) {
						t.Errorf("%s leg: violation %q body %s", role, rec.Violation, rec.Body)
					}
				}
			}
			if got := counterSum(t, env.reg, "infergate_tls_backend_handshakes_total", map[string]string{"result": "ok"}); got == 0 {
				t.Error("no TLS handshake to engines counted")
			}
		})
	}
}

// TestTLSClientCRLReload revokes a client certificate by rewriting the CRL
// file of a running rule: the next handshake with it is refused, without a
// re-POST; a CRL that does not parse keeps the previous one.
func TestTLSClientCRLReload(t *testing.T) {
	env := newTLSEnv(t)
	clientCA := tlstest.NewCA(t, "client-root")
	alice := clientCA.Issue(t, tlstest.LeafOptions{CommonName: "alice", Client: true})
	bob := clientCA.Issue(t, tlstest.LeafOptions{CommonName: "bob", Client: true})
	dir := t.TempDir()
	caPath, crlPath := filepath.Join(dir, "client_ca.crt"), filepath.Join(dir, "client.crl")
	tlstest.WriteFile(t, caPath, clientCA.CertPEM)
	tlstest.WriteFile(t, crlPath, clientCA.CRL(t)) // nothing revoked yet
	eng := startEngine(t, "e1")
	r := tlsRule(freePort(t), "", epFor(t, eng.Addr(), 1))
	r.TLS.Server.Client = &tlsmat.ClientAuth{Mode: "required", CAPath: caPath, CRLPath: crlPath}
	if err := env.rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	try := func(l *tlstest.Leaf) error {
		c := env.client("localhost", false, l.TLSCertificate(t))
		c.Transport.(*http.Transport).DisableKeepAlives = true
		resp, err := c.Post(httpsURL(r, "/v1/completions"), "application/json", strings.NewReader(completionBody))
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := try(alice); err != nil {
		t.Fatalf("alice before revocation: %v", err)
	}
	tlstest.WriteFile(t, crlPath, clientCA.CRL(t, alice))
	waitFor(t, 5*time.Second, "the new CRL to refuse alice", func() bool { return try(alice) != nil })
	if err := try(bob); err != nil {
		t.Fatalf("bob after alice's revocation: %v", err)
	}
	tlstest.WriteFile(t, crlPath, []byte("not a CRL"))
	waitFor(t, 5*time.Second, "the broken CRL to be counted", func() bool {
		return counterSum(t, env.reg, "infergate_tls_cert_reload_failures_total", nil) >= 1
	})
	if try(alice) == nil || try(bob) != nil {
		t.Fatal("a broken CRL changed who is let in")
	}
}
