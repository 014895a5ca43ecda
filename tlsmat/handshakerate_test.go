package tlsmat

import (
	"crypto/tls"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/tlsmat/tlstest"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func tcpAddr(s string) net.Addr {
	ap, err := net.ResolveTCPAddr("tcp", s)
	if err != nil {
		panic(err)
	}
	return ap
}

// TestHandshakeLimiter: each source has its own bucket (an IPv4 address,
// an IPv6 /64, mapped addresses as IPv4), spends one token per handshake,
// refills at the rate up to the burst; nil or a zero rate limits nothing.
func TestHandshakeLimiter(t *testing.T) {
	type step struct {
		after time.Duration // clock advance before the handshake
		addr  string
		want  bool
	}
	for _, tc := range []struct {
		name   string
		rate   float64
		burst  int
		steps  []step
		nilLim bool
	}{
		{"burst then refused", 1, 2, []step{{0, "10.0.0.1:1", true}, {0, "10.0.0.1:2", true}, {0, "10.0.0.1:3", false}}, false},
		{"other source has its own bucket", 1, 1, []step{{0, "10.0.0.1:1", true}, {0, "10.0.0.2:1", true}, {0, "10.0.0.1:2", false}}, false},
		{"refill at the rate", 2, 1, []step{{0, "10.0.0.1:1", true}, {0, "10.0.0.1:1", false}, {500 * time.Millisecond, "10.0.0.1:1", true}}, false},
		{"refill capped at the burst", 10, 2, []step{{time.Hour, "10.0.0.1:1", true}, {0, "10.0.0.1:1", true}, {0, "10.0.0.1:1", false}}, false},
		{"ipv6 /64 is one source", 1, 1, []step{{0, "[2001:db8::1]:1", true}, {0, "[2001:db8::ffff:1]:1", false}, {0, "[2001:db8:0:1::1]:1", true}}, false},
		{"mapped ipv4 is the ipv4 source", 1, 1, []step{{0, "10.0.0.1:1", true}, {0, "[::ffff:10.0.0.1]:1", false}}, false},
		{"zero burst is the rate", 3, 0, []step{{0, "10.0.0.1:1", true}, {0, "10.0.0.1:1", true}, {0, "10.0.0.1:1", true}, {0, "10.0.0.1:1", false}}, false},
		{"no rate: no limit", 0, 0, []step{{0, "10.0.0.1:1", true}, {0, "10.0.0.1:1", true}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewHandshakeLimiter(tc.rate, tc.burst)
			if (l == nil) != tc.nilLim {
				t.Fatalf("limiter nil = %v, want %v", l == nil, tc.nilLim)
			}
			now := time.Unix(1000, 0)
			if l != nil {
				l.now = func() time.Time { return now }
			}
			for i, s := range tc.steps {
				now = now.Add(s.after)
				if got := l.Allow(tcpAddr(s.addr)); got != s.want {
					t.Fatalf("step %d (%s): Allow = %v, want %v", i, s.addr, got, s.want)
				}
			}
		})
	}
}

// TestFrontendRefusesHandshakesOverTheRate: a source over its handshake
// budget is refused right after its ClientHello and counted
// rate_limited; another source is still served.
func TestFrontendRefusesHandshakesOverTheRate(t *testing.T) {
	ca := tlstest.NewCA(t, "test-root")
	leaf := ca.Issue(t, tlstest.LeafOptions{CommonName: "vip", IPs: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv4(127, 0, 0, 2)}})
	site := &Site{}
	cert := leaf.TLSCertificate(t)
	site.cfg.Store(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	reg := prometheus.NewRegistry()
	m := metrics.NewTLS(reg)
	fe := NewFrontend("vip", m)
	fe.SetSites([]*Site{site})
	const burst = 3
	fe.LimitHandshakes(NewHandshakeLimiter(0.001, burst))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}),
		ConnContext: fe.ConnContext, ConnState: fe.ConnState}
	go func() { _ = srv.Serve(fe.Listener(ln)) }()
	t.Cleanup(func() { _ = srv.Close() })

	handshake := func(from string) error {
		d := &net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		c, err := tls.DialWithDialer(d, "tcp", ln.Addr().String(), &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"})
		if err == nil {
			c.Close()
		}
		return err
	}
	for i := range burst {
		if err := handshake("127.0.0.1"); err != nil {
			t.Fatalf("handshake %d within the burst: %v", i, err)
		}
	}
	if err := handshake("127.0.0.1"); err == nil {
		t.Fatal("a handshake over the source's rate succeeded")
	}
	if err := handshake("127.0.0.2"); err != nil {
		t.Fatalf("another source was refused: %v", err)
	}
	limited := func() float64 {
		var d dto.Metric
		_ = m.Handshakes.WithLabelValues("vip", "rate_limited", "none").Write(&d)
		return d.GetCounter().GetValue()
	}
	deadline := time.Now().Add(5 * time.Second)
	for limited() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("rate_limited handshakes counted %v, want 1", limited())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
