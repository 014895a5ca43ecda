package tlsmat

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/metrics"
)

// Client-certificate modes (wire: mtls_frontend.client_cert_mode).
const (
	ClientCertDisabled = "disabled"
	ClientCertOptional = "optional"
	ClientCertRequired = "required"
)

// ServerParams is the server side of one rule's TLS, every default resolved
// by the rules compiler. It is plain data (part of the immutable compiled
// rule); NewSite turns it into a crypto/tls configuration.
type ServerParams struct {
	// CertHost names the certificate: the rule's host field, which is also
	// the SNI name that selects this rule's settings. "" = the VIP default.
	CertHost   string
	MinVersion uint16
	MaxVersion uint16
	Ciphers    []uint16 // TLS 1.2 suites; nil = crypto/tls's defaults
	ALPN       []string
	HSTS       string // Strict-Transport-Security value, "" = none
	Client     *ClientAuth
}

// ClientAuth is mtls_frontend with a mode other than disabled.
type ClientAuth struct {
	Mode      string // ClientCertOptional or ClientCertRequired
	CAPath    string
	CAData    string // inline PEM bundle (public: CA certificates)
	RequireCN bool
	CNPattern string // shell pattern (path.Match) on a DNS SAN or the CN
	CRLPath   string
}

// Site is one rule's live server configuration on a listener. It holds a
// reference on its certificate until Close.
type Site struct {
	params ServerParams
	cert   *Handle
	cfg    atomic.Pointer[tls.Config] // swapped when the client CA or CRL files change
	watch  *fileWatch                 // client CA/CRL files; nil without file-based client trust
}

// errClientRejected marks a handshake refused by client-certificate policy
// (counted as client_cert_rejected, not as a generic failure).
type errClientRejected struct{ reason string }

func (e *errClientRejected) Error() string { return "client certificate rejected: " + e.reason }

// Wire paths of mtls_frontend fields, for errors.
const (
	fieldClientCAPath = "serviceArguments.mtls_frontend.client_ca_path"
	fieldClientCAData = "serviceArguments.mtls_frontend.client_ca_cert_data"
	fieldClientCRL    = "serviceArguments.mtls_frontend.client_crl_path"
)

// FieldError is a MaterialError tied to a wire field of the rule.
type FieldError struct {
	Field string
	*MaterialError
}

// NewSite builds a rule's server configuration: acquires its certificate and
// loads its client CA and CRL. Errors are *FieldError; nothing is held.
func (s *Store) NewSite(p ServerParams) (*Site, error) {
	h, err := s.Acquire(p.CertHost)
	if err != nil {
		var me *MaterialError
		if errors.As(err, &me) {
			f := "serviceArguments.security"
			if p.CertHost != "" {
				f = "serviceArguments.host"
			}
			return nil, &FieldError{Field: f, MaterialError: me}
		}
		return nil, err
	}
	site := &Site{params: p, cert: h}
	tickets := &tls.Config{} // holds this site's session ticket keys only (tickets.go)
	cfg := &tls.Config{
		MinVersion:   p.MinVersion,
		MaxVersion:   p.MaxVersion,
		CipherSuites: p.Ciphers,
		NextProtos:   p.ALPN,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return h.Cert().TLS, nil
		},
	}
	withSessionTickets(cfg, tickets)
	if ca := p.Client; ca != nil {
		pool, crl, err := loadClientTrust(ca)
		if err != nil {
			h.Release()
			return nil, err
		}
		withClientTrust(cfg, ca, pool, crl, s.now)
		site.watch = s.watchFiles(clientTrustFiles(ca), func() error {
			pool, crl, err := loadClientTrust(ca)
			if err != nil {
				return err
			}
			next := cfg.Clone()
			withClientTrust(next, ca, pool, crl, s.now)
			site.cfg.Store(next)
			return nil
		})
	}
	site.cfg.Store(cfg)
	return site, nil
}

// withClientTrust sets the client-certificate policy of cfg.
func withClientTrust(cfg *tls.Config, ca *ClientAuth, pool *x509.CertPool, crl *x509.RevocationList, now func() time.Time) {
	cfg.ClientCAs = pool
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	if ca.Mode == ClientCertOptional {
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	}
	cfg.VerifyPeerCertificate = clientPolicy(ca, crl, now)
	cfg.VerifyConnection = resumedClientCheck(pool, cfg.VerifyPeerCertificate, now) // tickets.go
}

// clientTrustFiles are the files a site's client trust is read from.
func clientTrustFiles(ca *ClientAuth) []string {
	var out []string
	if ca.CAData == "" && ca.CAPath != "" {
		out = append(out, ca.CAPath)
	}
	if ca.CRLPath != "" {
		out = append(out, ca.CRLPath)
	}
	return out
}

func loadClientTrust(ca *ClientAuth) (*x509.CertPool, *x509.RevocationList, error) {
	var pool *x509.CertPool
	if ca.CAData != "" {
		p, reason := ParseCAPEM([]byte(ca.CAData))
		if reason != "" {
			return nil, nil, &FieldError{Field: fieldClientCAData, MaterialError: &MaterialError{Reason: reason}}
		}
		pool = p
	} else {
		p, err := LoadCAFile(ca.CAPath)
		if err != nil {
			return nil, nil, &FieldError{Field: fieldClientCAPath, MaterialError: err.(*MaterialError)}
		}
		pool = p
	}
	var crl *x509.RevocationList
	if ca.CRLPath != "" {
		c, err := LoadCRL(ca.CRLPath)
		if err != nil {
			return nil, nil, &FieldError{Field: fieldClientCRL, MaterialError: err.(*MaterialError)}
		}
		crl = c
	}
	return pool, crl, nil
}

// clientPolicy runs after crypto/tls verified the chain: the CRL and the
// CN/SAN pattern. It sees no certificate when an optional one was not sent.
func clientPolicy(ca *ClientAuth, crl *x509.RevocationList, now func() time.Time) func([][]byte, [][]*x509.Certificate) error {
	return func(_ [][]byte, chains [][]*x509.Certificate) error {
		if len(chains) == 0 || len(chains[0]) == 0 {
			return nil // optional mode, no certificate: crypto/tls already decided
		}
		leaf := chains[0][0]
		if crl != nil {
			for _, rc := range crl.RevokedCertificateEntries {
				if rc.SerialNumber.Cmp(leaf.SerialNumber) == 0 {
					return &errClientRejected{reason: "certificate serial " + leaf.SerialNumber.String() + " is revoked"}
				}
			}
		}
		if ca.RequireCN && !MatchClientName(ca.CNPattern, leaf) {
			return &errClientRejected{reason: "certificate name does not match " + ca.CNPattern}
		}
		return nil
	}
}

// MatchClientName matches a DNS SAN first, then the CN, against a shell
// pattern (case-insensitive), as LoxiLB's client_cn_pattern does.
func MatchClientName(pattern string, leaf *x509.Certificate) bool {
	pattern = strings.ToLower(pattern)
	names := append(slices.Clone(leaf.DNSNames), leaf.Subject.CommonName)
	for _, n := range names {
		if n == "" {
			continue
		}
		if ok, _ := path.Match(pattern, strings.ToLower(n)); ok {
			return true
		}
	}
	return false
}

// Close releases the site's certificate and stops watching its files.
func (s *Site) Close() {
	if s != nil {
		s.cert.Release()
		s.watch.stop()
	}
}

// Params are the site's settings.
func (s *Site) Params() ServerParams { return s.params }

// Frontend is the TLS layer of one VIP listener: it picks the site of the
// rule the client's SNI names (else the VIP default) on every handshake.
type Frontend struct {
	listen string
	m      *metrics.TLS
	sites  atomic.Pointer[siteTable]
	seen   sync.Map // *tls.Conn → struct{}: handshake already counted
	// limit bounds handshakes per client source (handshakerate.go); nil:
	// none. Set before Listener is called.
	limit *HandshakeLimiter
}

// LimitHandshakes makes the frontend refuse handshakes over l's rate per
// source (nil: no limit). Call before Listener.
func (f *Frontend) LimitHandshakes(l *HandshakeLimiter) { f.limit = l }

type siteTable struct {
	byHost map[string]*Site
	def    *Site
}

// NewFrontend builds the TLS layer of the listener at listen.
func NewFrontend(listen string, m *metrics.TLS) *Frontend {
	f := &Frontend{listen: listen, m: m}
	f.sites.Store(&siteTable{})
	return f
}

// SetSites publishes the sites of the rules now on the listener. The
// default (no-SNI) site is the one without a CertHost, else the first.
func (f *Frontend) SetSites(sites []*Site) {
	t := &siteTable{byHost: make(map[string]*Site, len(sites))}
	for _, s := range sites {
		h := strings.ToLower(s.params.CertHost)
		if h == "" {
			if t.def == nil || t.def.params.CertHost != "" {
				t.def = s
			}
			continue
		}
		if _, dup := t.byHost[h]; !dup {
			t.byHost[h] = s
		}
		if t.def == nil {
			t.def = s
		}
	}
	f.sites.Store(t)
}

func (f *Frontend) site(serverName string) *Site {
	s, _ := f.siteFor(serverName)
	return s
}

// siteFor is site, also telling whether the name selected it (false: the
// VIP default applied).
func (f *Frontend) siteFor(serverName string) (*Site, bool) {
	t := f.sites.Load()
	if serverName != "" {
		if s := t.byHost[strings.ToLower(strings.TrimSuffix(serverName, "."))]; s != nil {
			return s, true
		}
	}
	return t.def, false
}

// errNoSite fails a handshake on a listener with no site for the name.
var errNoSite = errors.New("tls: no certificate for this server name")

// Listener wraps an (admitted) listener in TLS.
func (f *Frontend) Listener(inner net.Listener) net.Listener {
	return tls.NewListener(inner, &tls.Config{
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			if !f.limit.Allow(hello.Conn.RemoteAddr()) {
				return nil, errHandshakeRateLimited // before any key exchange
			}
			s, byName := f.siteFor(hello.ServerName)
			if s == nil {
				return nil, errNoSite
			}
			record(hello.Context(), s, byName) // checked per request (Misdirected)
			return s.cfg.Load(), nil
		},
	})
}

// HSTS is the Strict-Transport-Security value for a request ("" = none).
func (f *Frontend) HSTS(r *http.Request) string {
	if r.TLS == nil {
		return ""
	}
	if s := f.site(r.TLS.ServerName); s != nil {
		return s.params.HSTS
	}
	return ""
}

// ConnState counts handshakes: net/http calls it with StateActive/StateIdle
// only after a successful handshake, and with StateClosed either way, so a
// connection is counted once, when it first leaves StateNew.
func (f *Frontend) ConnState(c net.Conn, st http.ConnState) {
	tc, ok := c.(*tls.Conn)
	if !ok || st == http.StateNew || st == http.StateHijacked {
		return
	}
	cs := tc.ConnectionState()
	if cs.HandshakeComplete {
		_, already := f.seen.LoadOrStore(tc, struct{}{})
		if !already {
			f.m.Handshakes.WithLabelValues(f.listen, "ok", VersionName(cs.Version)).Inc()
		}
		if st == http.StateClosed {
			f.seen.Delete(tc)
		}
		return
	}
	if st != http.StateClosed {
		return
	}
	// The handshake failed (or never ran): Handshake returns the stored error
	// at once without touching the network.
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	err := tc.HandshakeContext(ctx)
	cancel()
	result := "failed"
	var rej *errClientRejected
	switch {
	case errors.Is(err, errHandshakeRateLimited):
		result = "rate_limited"
	case errors.As(err, &rej) || isClientCertAlert(err):
		result = "client_cert_rejected"
	}
	f.m.Handshakes.WithLabelValues(f.listen, result, "none").Inc()
}

// isClientCertAlert recognises crypto/tls's own refusals of a client
// certificate (missing when required, or not chaining to the client CA).
func isClientCertAlert(err error) bool {
	if err == nil {
		return false
	}
	s := err.Error()
	return strings.Contains(s, "client didn't provide a certificate") ||
		strings.Contains(s, "failed to verify certificate") ||
		strings.Contains(s, "client certificate")
}
