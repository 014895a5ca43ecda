package datapath

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/infergate/infergate/spec"
	"github.com/infergate/infergate/tlsmat"
	"github.com/infergate/infergate/tlsmat/tlstest"
)

// TestTLSSiteMustServeMatchedRule: SNI chooses the certificate and the
// client-certificate policy, Host/:authority chooses the rule; a request
// whose rule is not served by its handshake's site is 421
// misdirected_request and never reaches the rule's engine, on HTTP/1.1 and
// HTTP/2. Without SNI the VIP default site applies: open rules are served,
// a rule requiring client certificates is not.
func TestTLSSiteMustServeMatchedRule(t *testing.T) {
	const hostA, hostB = "a.example.com", "b.example.com"
	env := newTLSEnv(t, hostA, hostB)
	clientCA := tlstest.NewCA(t, "client-root")
	good := clientCA.Issue(t, tlstest.LeafOptions{CommonName: "svc.internal.corp", Client: true})
	caPath := filepath.Join(t.TempDir(), "client_ca.crt")
	tlstest.WriteFile(t, caPath, clientCA.CertPEM)

	engA, engB, engDef := startEngine(t, "a"), startEngine(t, "b"), startEngine(t, "def")
	port := freePort(t)
	ruleA := tlsRule(port, hostA, epFor(t, engA.Addr(), 1))
	ruleA.TLS.Server.Client = &tlsmat.ClientAuth{Mode: tlsmat.ClientCertRequired, CAPath: caPath}
	ruleB := tlsRule(port, hostB, epFor(t, engB.Addr(), 1))
	ruleDef := tlsRule(port, "", epFor(t, engDef.Addr(), 1))
	for _, r := range []*spec.Rule{ruleA, ruleB, ruleDef} {
		if err := env.rt.Install(nil, r); err != nil {
			t.Fatal(err)
		}
	}
	noSNI := func(h2 bool, certs ...tls.Certificate) *http.Client {
		c := env.client("", h2, certs...)
		// No ServerName and an IP in the URL: crypto/tls sends no SNI; the
		// default certificate names no IP, so the test skips verification.
		c.Transport.(*http.Transport).TLSClientConfig.InsecureSkipVerify = true
		return c
	}
	cert := []tls.Certificate{good.TLSCertificate(t)}
	type want struct {
		status int
		eng    string // engine that must answer on 200
	}
	for _, tc := range []struct {
		name string
		sni  string // "-": none
		host string
		cert []tls.Certificate
		want want
	}{
		{"sni b host a without certificate", hostB, hostA, nil, want{421, ""}},
		{"sni b host a with certificate", hostB, hostA, cert, want{421, ""}},
		{"sni a host b", hostA, hostB, cert, want{421, ""}},
		{"sni a host a", hostA, hostA, cert, want{200, "a"}},
		{"sni b host b", hostB, hostB, nil, want{200, "b"}},
		{"no sni host a", "-", hostA, nil, want{421, ""}},
		{"no sni host a with certificate", "-", hostA, cert, want{421, ""}},
		{"no sni host b", "-", hostB, nil, want{200, "b"}},
		{"no sni any host", "-", "10.1.2.3", nil, want{200, "def"}},
		{"sni b any host", hostB, "10.1.2.3", nil, want{200, "def"}},
	} {
		for _, h2 := range []bool{false, true} {
			name := tc.name + map[bool]string{false: " h1", true: " h2"}[h2]
			t.Run(name, func(t *testing.T) {
				var c *http.Client
				if tc.sni == "-" {
					c = noSNI(h2, tc.cert...)
				} else {
					c = env.client(tc.sni, h2, tc.cert...)
				}
				before := [3]int64{engA.Served(), engB.Served(), engDef.Served()}
				req, _ := http.NewRequest(http.MethodPost, httpsURL(ruleA, "/v1/completions"), strings.NewReader(completionBody))
				req.Host = tc.host
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != tc.want.status {
					t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.want.status, b)
				}
				after := [3]int64{engA.Served(), engB.Served(), engDef.Served()}
				var wantDelta [3]int64
				switch tc.want.eng {
				case "a":
					wantDelta[0] = 1
				case "b":
					wantDelta[1] = 1
				case "def":
					wantDelta[2] = 1
				}
				for i := range after {
					if after[i]-before[i] != wantDelta[i] {
						t.Fatalf("engines served %v more, want %v", [3]int64{after[0] - before[0], after[1] - before[1], after[2] - before[2]}, wantDelta)
					}
				}
				if tc.want.status == http.StatusMisdirectedRequest {
					var e struct {
						Error struct{ Code string } `json:"error"`
					}
					if err := json.Unmarshal(b, &e); err != nil || e.Error.Code != CodeMisdirected {
						t.Errorf("body %s: want code %s", b, CodeMisdirected)
					}
				}
			})
		}
	}
	if n := counterSum(t, env.reg, "infergate_tls_misdirected_requests_total",
		map[string]string{"listener": ruleA.Key.ListenAddr().String()}); n != 10 {
		t.Errorf("infergate_tls_misdirected_requests_total = %v, want 10 (5 refused shapes × h1, h2)", n)
	}
}
