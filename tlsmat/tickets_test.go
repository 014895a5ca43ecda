package tlsmat

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/tlsmat/tlstest"
)

// anyNameCache is a client session cache that offers its last ticket to
// every server name: a hostile client carrying one site's ticket to
// another.
type anyNameCache struct {
	mu sync.Mutex
	cs *tls.ClientSessionState
}

func (c *anyNameCache) Get(string) (*tls.ClientSessionState, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cs, c.cs != nil
}

func (c *anyNameCache) Put(_ string, cs *tls.ClientSessionState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cs != nil {
		c.cs = cs
	}
}

// ticketEnv is a listener whose sites take client certificates, and a
// hostile client that offers its last ticket under any SNI.
type ticketEnv struct {
	serverCA, clientCA *tlstest.CA
	root               string
	st                 *Store
	addr               string
	cache              *anyNameCache
}

func newTicketEnv(t *testing.T, hosts ...string) *ticketEnv {
	t.Helper()
	e := &ticketEnv{serverCA: tlstest.NewCA(t, "server-root"), clientCA: tlstest.NewCA(t, "client-root"), root: t.TempDir(), cache: &anyNameCache{}}
	e.serverCA.Issue(t, tlstest.LeafOptions{CommonName: "default"}).WriteDir(t, e.root, nil)
	for _, h := range hosts {
		e.serverCA.Issue(t, tlstest.LeafOptions{CommonName: h, DNSNames: []string{h}}).WriteDir(t, filepath.Join(e.root, h), nil)
	}
	opts := DefaultOptions()
	opts.CertRoot, opts.ReloadInterval = e.root, 20*time.Millisecond
	e.st = NewStore(opts, nil, nil)
	e.st.Start()
	t.Cleanup(e.st.Close)
	return e
}

func (e *ticketEnv) site(t *testing.T, version uint16, host string, ca *ClientAuth) *Site {
	t.Helper()
	s, err := e.st.NewSite(ServerParams{CertHost: host, MinVersion: version, MaxVersion: version, ALPN: []string{"http/1.1"}, Client: ca})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func (e *ticketEnv) serve(t *testing.T, sites ...*Site) {
	t.Helper()
	fe := NewFrontend("vip", nil)
	fe.SetSites(sites)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }),
		ConnContext: fe.ConnContext}
	go func() { _ = srv.Serve(fe.Listener(ln)) }()
	t.Cleanup(func() { _ = srv.Close() })
	e.addr = ln.Addr().String()
}

// get runs one request under SNI name presenting cert and reports whether
// the session resumed and whether the request was answered.
func (e *ticketEnv) get(name string, version uint16, cert tls.Certificate) (resumed, answered bool) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", e.addr, &tls.Config{
		// A hostile client: it skips checking the server (Go's client
		// would also refuse to offer a ticket whose server certificate
		// does not name the new SNI).
		InsecureSkipVerify: true, //nolint:gosec // the attacker's choice
		ServerName:         name, ClientSessionCache: e.cache, MinVersion: version, MaxVersion: version,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil },
	})
	if err != nil {
		return false, false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	resumed = c.ConnectionState().DidResume
	req, _ := http.NewRequest(http.MethodGet, "https://"+name+"/", nil)
	if err := req.Write(c); err != nil {
		return resumed, false
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		return resumed, false
	}
	resp.Body.Close()
	return resumed, resp.StatusCode == http.StatusOK
}

var ticketVersions = []uint16{tls.VersionTLS12, tls.VersionTLS13}

// TestSessionTicketsStayWithTheirSite: rules A and B on one listener take
// client certificates from the same CA, A for names *.a.internal, B for
// *.b.internal. A client with an A certificate resumes A's session on A,
// but A's ticket offered under SNI B does not resume (a resumed handshake
// runs no name check: crypto/tls re-verifies the chain, and the chain is
// fine): the full handshake that follows refuses the A certificate.
func TestSessionTicketsStayWithTheirSite(t *testing.T) {
	for _, version := range ticketVersions {
		t.Run(VersionName(version), func(t *testing.T) {
			e := newTicketEnv(t, "a.example", "b.example")
			policy := func(pattern string) *ClientAuth {
				return &ClientAuth{Mode: ClientCertRequired, CAData: string(e.clientCA.CertPEM), RequireCN: true, CNPattern: pattern}
			}
			e.serve(t, e.site(t, version, "a.example", policy("*.a.internal")), e.site(t, version, "b.example", policy("*.b.internal")))
			certA := e.clientCA.Issue(t, tlstest.LeafOptions{CommonName: "x.a.internal", Client: true}).TLSCertificate(t)
			if resumed, ok := e.get("a.example", version, certA); resumed || !ok {
				t.Fatalf("first request to A: resumed %v, answered %v; want a full handshake, answered", resumed, ok)
			}
			if resumed, ok := e.get("a.example", version, certA); !resumed || !ok {
				t.Fatalf("second request to A: resumed %v, answered %v; want A's own ticket to resume", resumed, ok)
			}
			if resumed, ok := e.get("b.example", version, certA); resumed || ok {
				t.Fatalf("A's ticket under SNI B: resumed %v, answered %v; want no resumption and the A certificate refused", resumed, ok)
			}
		})
	}
}

// TestRevokedClientCannotResume: a client certificate revoked (the CRL
// file reloaded) after its session began is refused on resumption too, not
// only on its next full handshake.
func TestRevokedClientCannotResume(t *testing.T) {
	for _, version := range ticketVersions {
		t.Run(VersionName(version), func(t *testing.T) {
			e := newTicketEnv(t, "a.example")
			crl := filepath.Join(t.TempDir(), "client.crl")
			tlstest.WriteFile(t, crl, e.clientCA.CRL(t))
			e.serve(t, e.site(t, version, "a.example", &ClientAuth{Mode: ClientCertRequired, CAData: string(e.clientCA.CertPEM), CRLPath: crl}))
			leaf := e.clientCA.Issue(t, tlstest.LeafOptions{CommonName: "client", Client: true})
			cert := leaf.TLSCertificate(t)
			if _, ok := e.get("a.example", version, cert); !ok {
				t.Fatal("the client was refused before its revocation")
			}
			tlstest.WriteFile(t, crl, e.clientCA.CRL(t, leaf))
			deadline := time.Now().Add(5 * time.Second)
			for {
				resumed, ok := e.get("a.example", version, cert)
				if !ok {
					break // refused: on resumption, or (cache emptied) in full
				}
				if !resumed {
					t.Fatal("a full handshake admitted a revoked certificate")
				}
				if time.Now().After(deadline) {
					t.Fatal("a revoked certificate still resumes its session after the CRL reload")
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// TestResumedClientCheck: a resumed session's client certificate is
// verified again against the trust in force now; full handshakes (already
// verified) and sessions without a certificate pass through.
func TestResumedClientCheck(t *testing.T) {
	ca, other := tlstest.NewCA(t, "client-ca"), tlstest.NewCA(t, "other-ca")
	leaf := ca.Issue(t, tlstest.LeafOptions{CommonName: "client", Client: true})
	cert, err := x509.ParseCertificate(leaf.TLSCertificate(t).Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	pass := func([][]byte, [][]*x509.Certificate) error { return nil }
	refuse := func([][]byte, [][]*x509.Certificate) error { return &errClientRejected{reason: "revoked"} }
	for _, tc := range []struct {
		name    string
		resumed bool
		peers   []*x509.Certificate
		pool    *x509.CertPool
		policy  func([][]byte, [][]*x509.Certificate) error
		wantErr bool
	}{
		{"full handshake", false, []*x509.Certificate{cert}, other.Pool(), refuse, false},
		{"resumed, no certificate", true, nil, other.Pool(), refuse, false},
		{"resumed, still trusted", true, []*x509.Certificate{cert}, ca.Pool(), pass, false},
		{"resumed, CA no longer trusted", true, []*x509.Certificate{cert}, other.Pool(), pass, true},
		{"resumed, policy now refuses (revoked)", true, []*x509.Certificate{cert}, ca.Pool(), refuse, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := resumedClientCheck(tc.pool, tc.policy, time.Now)(tls.ConnectionState{DidResume: tc.resumed, PeerCertificates: tc.peers})
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
		})
	}
}
