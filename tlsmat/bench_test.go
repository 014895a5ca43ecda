package tlsmat

import (
	"crypto/tls"
	"fmt"
	"net"
	"path/filepath"
	"testing"

	"github.com/infergate/infergate/tlsmat/tlstest"
)

// benchFrontend is a Frontend with n hostname sites (key type k) whose
// certificates all come from one CA.
func benchFrontend(b *testing.B, n int, k tlstest.KeyType) (*Frontend, *tlstest.CA, []string) {
	b.Helper()
	ca := tlstest.NewCA(b, "bench-root")
	root := b.TempDir()
	leaf := ca.Issue(b, tlstest.LeafOptions{Key: k, DNSNames: []string{"localhost", "h0.example.com"}})
	opts := DefaultOptions()
	opts.CertRoot = root
	s := NewStore(opts, nil, nil)
	f := NewFrontend("bench", s.m)
	leaf.WriteDir(b, filepath.Join(root, "h0.example.com"), nil)
	first, err := s.NewSite(ServerParams{CertHost: "h0.example.com", MinVersion: tls.VersionTLS12, MaxVersion: tls.VersionTLS13, ALPN: DefaultALPN})
	if err != nil {
		b.Fatal(err)
	}
	sites := []*Site{first}
	hosts := []string{"h0.example.com"}
	for i := 1; i < n; i++ { // more names on the same material: only the lookup is measured
		h := fmt.Sprintf("h%d.example.com", i)
		site := &Site{params: first.params, cert: first.cert}
		site.params.CertHost = h
		site.cfg.Store(first.cfg.Load())
		sites = append(sites, site)
		hosts = append(hosts, h)
	}
	f.SetSites(sites)
	return f, ca, hosts
}

// BenchmarkHandshake is one full TLS 1.3 handshake (no resumption) through
// a Frontend's listener on loopback: server and client cost together, so
// compare the key types with each other, not with a server-only figure
// (test/bench/tls.sh measures the server alone against nginx).
func BenchmarkHandshake(b *testing.B) {
	for _, kt := range []struct {
		name string
		k    tlstest.KeyType
	}{{"ECDSA-P256", tlstest.ECDSAP256}, {"RSA-2048", tlstest.RSA2048}} {
		b.Run(kt.name, func(b *testing.B) {
			f, ca, hosts := benchFrontend(b, 1, kt.k)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			tl := f.Listener(ln)
			go func() {
				for {
					c, err := tl.Accept()
					if err != nil {
						return
					}
					go func() { _ = c.(*tls.Conn).Handshake(); _ = c.Close() }()
				}
			}()
			cliCfg := &tls.Config{RootCAs: ca.Pool(), ServerName: hosts[0]} // no session cache: full handshakes
			b.ReportAllocs()
			for b.Loop() {
				c, err := tls.Dial("tcp", ln.Addr().String(), cliCfg)
				if err != nil {
					b.Fatal(err)
				}
				_ = c.Close()
			}
		})
	}
}

// BenchmarkSiteLookup is the per-handshake SNI lookup with 1 and 10,000
// hostnames on one listener: it must stay flat.
func BenchmarkSiteLookup(b *testing.B) {
	for _, n := range []int{1, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			f, _, hosts := benchFrontend(b, n, tlstest.ECDSAP256)
			name := hosts[len(hosts)/2]
			b.ReportAllocs()
			for b.Loop() {
				if f.site(name) == nil {
					b.Fatal("no site")
				}
			}
		})
	}
}
