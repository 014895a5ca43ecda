package cli

import (
	"strings"

	"github.com/infergate/infergate/rules"
	"github.com/spf13/pflag"
)

// tlsFlags are `create lb`'s TLS flags. --security takes
// loxicmd's names; the rest map one to one onto LoxiLB's TLS fields.
type tlsFlags struct {
	security             string
	versions, alpn       string // comma lists
	frontend             rules.MTLSFrontend
	backend              rules.MTLSBackend
	verify               bool
	fs                   *pflag.FlagSet
	ciphers              string
	hstsMaxAge           int
	hstsSub, hstsPreload bool
}

func (t *tlsFlags) add(fl *pflag.FlagSet) {
	t.fs = fl
	fl.StringVar(&t.security, "security", "", "TLS: https|tls (terminate at the VIP, security 1), e2ehttps|e2etls (also TLS to engines, security 2); default plaintext")
	fl.StringVar(&t.versions, "tls-versions", "", "TLS versions, e.g. TLSv1.2,TLSv1.3 (default both)")
	fl.StringVar(&t.ciphers, "tls-ciphers", "", "TLS 1.2 cipher suites, ':'-separated OpenSSL or IANA names")
	fl.StringVar(&t.alpn, "alpn", "", "ALPN protocols offered to clients, e.g. h2,http/1.1 (default both)")
	fl.IntVar(&t.hstsMaxAge, "hsts-max-age", 0, "Strict-Transport-Security max-age in seconds (0: no header)")
	fl.BoolVar(&t.hstsSub, "hsts-include-subdomains", false, "HSTS includeSubDomains")
	fl.BoolVar(&t.hstsPreload, "hsts-preload", false, "HSTS preload")
	fl.StringVar(&t.frontend.ClientCertMode, "client-cert-mode", "", "client certificates: disabled|optional|required")
	fl.StringVar(&t.frontend.ClientCAPath, "client-ca-path", "", "CA bundle that signs client certificates")
	fl.BoolVar(&t.frontend.RequireClientCN, "require-client-cn", false, "require the client name to match --client-cn-pattern")
	fl.StringVar(&t.frontend.ClientCNPattern, "client-cn-pattern", "", "client DNS SAN / CN pattern, e.g. *.internal.example.com")
	fl.StringVar(&t.frontend.ClientCRLPath, "client-crl-path", "", "CRL of revoked client certificates")
	fl.BoolVar(&t.verify, "verify-server-cert", true, "security 2: verify engine certificates (LoxiLB's default is false)")
	fl.StringVar(&t.backend.BackendCAPath, "backend-ca-path", "", "security 2: CA bundle that signs engine certificates")
	fl.StringVar(&t.backend.ClientCertPath, "backend-client-cert", "", "security 2: client certificate presented to engines")
	fl.StringVar(&t.backend.ClientKeyPath, "backend-client-key", "", "security 2: its private key")
}

// apply sets the TLS fields on sa; the server validates them.
func (t *tlsFlags) apply(sa *rules.ServiceArguments) error {
	switch strings.ToLower(t.security) {
	case "", "none", "plain", "0":
	case "https", "tls", "1":
		sa.Security = 1
	case "e2ehttps", "e2etls", "2":
		sa.Security = 2
	default:
		return usagef("--security %q: use https, tls, e2ehttps or e2etls", t.security)
	}
	sa.TLSVersions, sa.ALPNProtocols = commaList(t.versions), commaList(t.alpn)
	sa.TLSCiphers, sa.HSTSMaxAge, sa.HSTSIncludeSubdomains, sa.HSTSPreload = t.ciphers, t.hstsMaxAge, t.hstsSub, t.hstsPreload
	if t.frontend != (rules.MTLSFrontend{}) {
		fe := t.frontend
		sa.MTLSFrontend = &fe
	}
	if t.backend != (rules.MTLSBackend{}) || t.fs.Changed("verify-server-cert") {
		be := t.backend
		if t.fs.Changed("verify-server-cert") {
			v := t.verify
			be.VerifyServerCert = &v
		}
		sa.MTLSBackend = &be
	}
	return nil
}

func commaList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// protoCell is loxicmd's Proto column: "tcp:https" for TLS rules.
func protoCell(sa rules.ServiceArguments) string {
	switch sa.Security {
	case 1:
		return sa.Protocol + ":https"
	case 2:
		return sa.Protocol + ":e2ehttps"
	}
	return sa.Protocol
}
