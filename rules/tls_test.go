package rules

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/tlsmat"
	"github.com/infergate/infergate/tlsmat/tlstest"
)

func tlsRule() Rule {
	r := plainRule()
	r.ServiceArguments.Security = 1
	return r
}

func e2eRule() Rule {
	r := plainRule()
	r.ServiceArguments.Security = 2
	return r
}

func TestValidateTLSRejects(t *testing.T) {
	ca := tlstest.NewCA(t, "rules-ca")
	leaf := ca.Issue(t, tlstest.LeafOptions{CommonName: "gw", Client: true})
	other := ca.Issue(t, tlstest.LeafOptions{CommonName: "gw2", Client: true})
	const bad, combo, field = 400, apierror.CodeInvalidCombo, apierror.CodeInvalidField
	tests := []struct {
		name   string
		base   func() Rule
		mutate func(*Rule)
		code   string
		field  string
		why    string
	}{
		{"mtls_frontend on security 0", plainRule, func(r *Rule) {
			r.ServiceArguments.MTLSFrontend = &MTLSFrontend{ClientCertMode: "required", ClientCAPath: "/ca.crt"}
		}, combo, "serviceArguments.mtls_frontend", "security 0"},
		{"mtls_backend on security 0", plainRule, func(r *Rule) { r.ServiceArguments.MTLSBackend = &MTLSBackend{} }, combo, "serviceArguments.mtls_backend", "security 0"},
		{"tls_versions on security 0", plainRule, func(r *Rule) { r.ServiceArguments.TLSVersions = []string{"TLSv1.3"} }, combo, "serviceArguments.tls_versions", "security 0"},
		{"hsts on security 0", plainRule, func(r *Rule) { r.ServiceArguments.HSTSMaxAge = 100 }, combo, "serviceArguments.hsts_max_age", "security 0"},
		{"SSLv3", tlsRule, func(r *Rule) { r.ServiceArguments.TLSVersions = []string{"TLSv1.2", "SSLv3"} }, field, "serviceArguments.tls_versions[1]", "insecure"},
		{"TLS 1.0", tlsRule, func(r *Rule) { r.ServiceArguments.TLSVersions = []string{"TLSv1"} }, field, "serviceArguments.tls_versions[0]", "insecure"},
		{"unknown version", tlsRule, func(r *Rule) { r.ServiceArguments.TLSVersions = []string{"TLSv2"} }, field, "serviceArguments.tls_versions[0]", "not a TLS version"},
		{"insecure cipher", tlsRule, func(r *Rule) { r.ServiceArguments.TLSCiphers = "TLS_RSA_WITH_RC4_128_SHA" }, field, "serviceArguments.tls_ciphers", "insecure"},
		{"ciphers with 1.3 only", tlsRule, func(r *Rule) {
			r.ServiceArguments.TLSVersions = []string{"TLSv1.3"}
			r.ServiceArguments.TLSCiphers = "ECDHE-RSA-AES128-GCM-SHA256"
		}, combo, "serviceArguments.tls_ciphers", "TLSv1.2 only"},
		{"alpn h3", tlsRule, func(r *Rule) { r.ServiceArguments.ALPNProtocols = []string{"h2", "h3"} }, field, "serviceArguments.alpn_protocols", "h3"},
		{"hsts subdomains without max age", tlsRule, func(r *Rule) { r.ServiceArguments.HSTSIncludeSubdomains = true }, combo, "serviceArguments.hsts_include_subdomains", "hsts_max_age"},
		{"hsts negative", tlsRule, func(r *Rule) { r.ServiceArguments.HSTSMaxAge = -1 }, field, "serviceArguments.hsts_max_age", ""},
		{"client cert mode without CA", tlsRule, func(r *Rule) {
			r.ServiceArguments.MTLSFrontend = &MTLSFrontend{ClientCertMode: "required"}
		}, combo, "serviceArguments.mtls_frontend.client_cert_mode", "needs a client CA"},
		{"client cert mode unknown", tlsRule, func(r *Rule) {
			r.ServiceArguments.MTLSFrontend = &MTLSFrontend{ClientCertMode: "sometimes", ClientCAPath: "/x"}
		}, field, "serviceArguments.mtls_frontend.client_cert_mode", "not one of"},
		{"empty inline CA bundle", tlsRule, func(r *Rule) {
			r.ServiceArguments.MTLSFrontend = &MTLSFrontend{ClientCertMode: "optional", ClientCACertData: "no pem here"}
		}, field, "serviceArguments.mtls_frontend.client_ca_cert_data", "holds no certificate"},
		{"both CA path and data", tlsRule, func(r *Rule) {
			r.ServiceArguments.MTLSFrontend = &MTLSFrontend{ClientCertMode: "optional", ClientCAPath: "/x", ClientCACertData: string(ca.CertPEM)}
		}, combo, "serviceArguments.mtls_frontend.client_ca_cert_data", "not both"},
		{"require cn without pattern", tlsRule, func(r *Rule) {
			r.ServiceArguments.MTLSFrontend = &MTLSFrontend{ClientCertMode: "required", ClientCAPath: "/x", RequireClientCN: true}
		}, combo, "serviceArguments.mtls_frontend.client_cn_pattern", ""},
		{"bad cn pattern", tlsRule, func(r *Rule) {
			r.ServiceArguments.MTLSFrontend = &MTLSFrontend{ClientCertMode: "required", ClientCAPath: "/x", RequireClientCN: true, ClientCNPattern: "[x"}
		}, field, "serviceArguments.mtls_frontend.client_cn_pattern", "not a valid pattern"},
		{"crl without mode", tlsRule, func(r *Rule) {
			r.ServiceArguments.MTLSFrontend = &MTLSFrontend{ClientCRLPath: "/crl"}
		}, combo, "serviceArguments.mtls_frontend.client_crl_path", ""},
		{"mtls_backend on security 1", tlsRule, func(r *Rule) { r.ServiceArguments.MTLSBackend = &MTLSBackend{} }, combo, "serviceArguments.mtls_backend", "security 2"},
		{"backend cert without key", e2eRule, func(r *Rule) {
			r.ServiceArguments.MTLSBackend = &MTLSBackend{ClientCertPath: "/c"}
		}, combo, "serviceArguments.mtls_backend.client_key_path", "together"},
		{"backend mismatched inline pair", e2eRule, func(r *Rule) {
			r.ServiceArguments.MTLSBackend = &MTLSBackend{ClientCertData: string(leaf.CertPEM), ClientKeyData: string(other.KeyPEM)}
		}, field, "serviceArguments.mtls_backend.client_cert_data", "does not match"},
		{"backend redaction marker", e2eRule, func(r *Rule) {
			r.ServiceArguments.MTLSBackend = &MTLSBackend{ClientCertData: string(leaf.CertPEM), ClientKeyData: tlsmat.Redacted}
		}, field, "serviceArguments.mtls_backend.client_key_data", "redaction"},
		{"host with a slash", tlsRule, func(r *Rule) { r.ServiceArguments.Host = "../etc" }, field, "serviceArguments.host", "certificate directory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.base()
			tc.mutate(&r)
			ae := wantAPIError(t, Validate(r), bad, tc.code, tc.field, "")
			if !strings.Contains(ae.Message, tc.why) {
				t.Errorf("message %q lacks %q", ae.Message, tc.why)
			}
		})
	}
}

func TestCompileTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "rules-ca")
	leaf := ca.Issue(t, tlstest.LeafOptions{CommonName: "gw", Client: true})
	r := e2eRule()
	sa := &r.ServiceArguments
	sa.Host = "api.example.com"
	sa.TLSVersions = []string{"TLSv1.3"}
	sa.HSTSMaxAge, sa.HSTSIncludeSubdomains = 600, true
	sa.MTLSFrontend = &MTLSFrontend{ClientCertMode: "required", ClientCACertData: string(ca.CertPEM), RequireClientCN: true, ClientCNPattern: "*.corp"}
	sa.MTLSBackend = &MTLSBackend{ClientCertData: string(leaf.CertPEM), ClientKeyData: string(leaf.KeyPEM)}
	c, err := Compile(r)
	if err != nil {
		t.Fatal(err)
	}
	tl := c.TLS
	switch {
	case tl == nil || tl.Security != 2:
		t.Fatalf("TLS = %+v", tl)
	case tl.Server.CertHost != "api.example.com" || tl.Server.MinVersion != 0x0304 || tl.Server.MaxVersion != 0x0304:
		t.Errorf("server = %+v", tl.Server)
	case strings.Join(tl.Server.ALPN, ",") != "h2,http/1.1":
		t.Errorf("ALPN default = %v", tl.Server.ALPN)
	case tl.Server.HSTS != "max-age=600; includeSubDomains":
		t.Errorf("HSTS = %q", tl.Server.HSTS)
	case tl.Server.Client == nil || tl.Server.Client.Mode != "required" || tl.Server.Client.CNPattern != "*.corp":
		t.Errorf("client auth = %+v", tl.Server.Client)
	case tl.Backend == nil || !tl.Backend.Verify:
		t.Errorf("backend verify must default to true: %+v", tl.Backend)
	}
	// Key material never shows in the compiled view's JSON.
	out, _ := json.Marshal(c)
	if strings.Contains(string(out), "PRIVATE KEY") {
		t.Fatalf("compiled rule JSON leaks the key: %s", out)
	}
	f := false
	sa.MTLSBackend.VerifyServerCert = &f
	c, _ = Compile(r)
	if c.TLS.Backend.Verify {
		t.Error("explicit verify_server_cert false ignored")
	}
	if c2, _ := Compile(plainRule()); c2.TLS != nil {
		t.Error("security 0 compiled TLS")
	}
}

func TestDecodeTLSFields(t *testing.T) {
	body := `{"serviceArguments":{"externalIP":"10.0.0.10","port":2020,"protocol":"tcp","mode":4,"security":1,
	  "tls_versions":["TLSv1.2","TLSv1.3"],"alpn_protocols":["h2"],"tls_ciphers":"ECDHE-ECDSA-AES128-GCM-SHA256",
	  "hsts_max_age":31536000,"hsts_include_subdomains":true,"hsts_preload":true,
	  "mtls_frontend":{"client_cert_mode":"optional","client_ca_path":"/etc/ca.crt"}},
	  "endpoints":[{"endpointIP":"10.1.0.1","targetPort":8000,"weight":1}]}`
	r, err := DecodeJSON([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	sa := r.ServiceArguments
	if len(sa.TLSVersions) != 2 || sa.ALPNProtocols[0] != "h2" || sa.MTLSFrontend.ClientCertMode != "optional" || !sa.HSTSPreload {
		t.Fatalf("decoded %+v", sa)
	}
	if err := Validate(r); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		`{"serviceArguments":{"tls_versions":"TLSv1.2"}}`,
		`{"serviceArguments":{"tls_versions":[1]}}`,
		`{"serviceArguments":{"mtls_frontend":{"client_cert_mod":"x"}}}`,
	} {
		if _, err := DecodeJSON([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

func TestGetRedactsInlineKey(t *testing.T) {
	ca := tlstest.NewCA(t, "rules-ca")
	leaf := ca.Issue(t, tlstest.LeafOptions{CommonName: "gw", Client: true})
	r := e2eRule()
	r.ServiceArguments.MTLSBackend = &MTLSBackend{ClientCertData: string(leaf.CertPEM), ClientKeyData: string(leaf.KeyPEM)}
	got := Redacted(normalize(r))
	if got.ServiceArguments.MTLSBackend.ClientKeyData != tlsmat.Redacted {
		t.Fatalf("GET copy shows key %q", got.ServiceArguments.MTLSBackend.ClientKeyData)
	}
	if r.ServiceArguments.MTLSBackend.ClientKeyData == tlsmat.Redacted {
		t.Fatal("redaction changed the stored rule")
	}
}

// LoxiLB-shaped TLS bodies (its field names and nesting, as its CLI and
// model send them) decode strictly and validate unchanged.
func TestLoxiLBTLSBodiesAccepted(t *testing.T) {
	for name, body := range map[string]string{
		"security 1 P/D with mTLS frontend": `{"serviceArguments":{"externalIP":"10.10.10.254","port":2020,"protocol":"tcp","sel":0,"mode":4,
		  "security":1,"name":"llm-pd","sse_mode":true,"cb_enable":true,"pd_disagg_mode":true,"pd_cache_aware_mode":true,
		  "kvExactMode":1,"kvEngineType":"vllm","hsts_max_age":31536000,"hsts_include_subdomains":true,
		  "mtls_frontend":{"client_cert_mode":"required","client_ca_path":"/opt/loxilb/cert/client_ca.crt",
		    "require_client_cn":true,"client_cn_pattern":"*.internal.corp.com"}},
		  "endpoints":[{"endpointIP":"31.31.31.1","targetPort":8000,"weight":1,"ep_role":1,"nixl_port":9001},
		               {"endpointIP":"32.32.32.1","targetPort":8000,"weight":1,"ep_role":2}]}`,
		"security 2 with mTLS backend": `{"serviceArguments":{"externalIP":"10.10.10.254","port":2021,"protocol":"tcp","sel":0,"mode":4,
		  "security":2,"host":"llm.example.com","mtls_backend":{"verify_server_cert":true,"backend_ca_path":"/opt/loxilb/cert/backend_ca.crt",
		    "client_cert_path":"/opt/loxilb/cert/backend_client.crt","client_key_path":"/opt/loxilb/cert/backend_client.key"}},
		  "endpoints":[{"endpointIP":"31.31.31.1","targetPort":8443,"weight":1}]}`,
		"security 1 optional mTLS with CRL": `{"serviceArguments":{"externalIP":"10.10.10.254","port":2022,"protocol":"tcp","mode":4,"security":1,
		  "tls_versions":["TLSv1.3"],"alpn_protocols":["h2","http/1.1"],
		  "mtls_frontend":{"client_cert_mode":"optional","client_ca_path":"/opt/loxilb/cert/client_ca.crt","client_crl_path":"/opt/loxilb/cert/client.crl"}},
		  "endpoints":[{"endpointIP":"31.31.31.1","targetPort":8000,"weight":1}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			r, err := DecodeJSON([]byte(body))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Compile(r); err != nil {
				t.Fatal(err)
			}
		})
	}
}
