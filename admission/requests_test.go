package admission

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/infergate/infergate/metrics"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func TestRequestCaps(t *testing.T) {
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	for _, tc := range []struct {
		name     string
		opts     Options
		listener int // SetLimit
		enters   []netip.Addr
		want     []string
		perIP    bool // CountsPerIP: the caller must parse addresses
	}{
		{"global", Options{MaxRequests: 2}, 0, []netip.Addr{a, b, b}, []string{"", "", metrics.RefusedGlobal}, false},
		{"global follows MaxConns", Options{MaxConns: 2}, 0, []netip.Addr{a, b, a}, []string{"", "", metrics.RefusedGlobal}, false},
		{"negative is no cap", Options{MaxConns: 1, MaxRequests: -1}, 0, []netip.Addr{a, a, a}, []string{"", "", ""}, false},
		{"per ip", Options{MaxRequestsPerIP: 2}, 0, []netip.Addr{a, a, a, b}, []string{"", "", metrics.RefusedPerIP, ""}, true},
		{"per ip follows MaxConnsPerIP", Options{MaxConnsPerIP: 1}, 0, []netip.Addr{a, a, b}, []string{"", metrics.RefusedPerIP, ""}, true},
		{"listener (connectionLimit)", Options{}, 2, []netip.Addr{a, b, b}, []string{"", "", metrics.RefusedListener}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := metrics.NewEdge(prometheus.NewRegistry())
			g := New(tc.opts, m)
			l := g.Wrap(nil)
			l.SetLimit(tc.listener)
			if got := l.CountsPerIP(); got != tc.perIP {
				t.Fatalf("CountsPerIP %v, want %v", got, tc.perIP)
			}
			var admitted []netip.Addr
			for i, ip := range tc.enters {
				got := l.EnterRequest(ip)
				if got != tc.want[i] {
					t.Fatalf("request %d from %v: %q, want %q", i, ip, got, tc.want[i])
				}
				if got == "" {
					admitted = append(admitted, ip)
				}
			}
			if g.InFlight() != len(admitted) {
				t.Fatalf("in flight %d, want %d", g.InFlight(), len(admitted))
			}
			if got := inFlightGauge(t, m); got != float64(len(admitted)) {
				t.Fatalf("infergate_edge_requests_in_flight %v, want %d (refused requests not counted)", got, len(admitted))
			}
			for _, ip := range admitted {
				l.LeaveRequest(ip)
			}
			if got := inFlightGauge(t, m); got != 0 {
				t.Fatalf("infergate_edge_requests_in_flight %v after leaving, want 0", got)
			}
			if g.InFlight() != 0 || l.reqOpen.Load() != 0 || g.reqs.perIP.held != 0 {
				t.Fatalf("after leaving: global %d listener %d per-ip held %d", g.InFlight(), l.reqOpen.Load(), g.reqs.perIP.held)
			}
			for _, ip := range tc.enters {
				if n := g.reqs.perIP.holding(ip); n != 0 {
					t.Fatalf("after leaving: %v holds %d", ip, n)
				}
			}
			// Every slot is free again: the first request is admitted.
			if got := l.EnterRequest(tc.enters[0]); got != "" {
				t.Fatalf("after leaving: %q", got)
			}
		})
	}
}

// TestRefusedRequestHoldsNoSlot: a request a cap refuses never holds a
// slot of another level, not even while it is being refused. A flood from
// one address over its share, refused per address, runs beside a client
// from another address on another listener whose requests fit every cap:
// each of those must be admitted, and every flood request refused at its
// own level. (With the levels taken widest first, each flood request held a
// global slot while it waited for the per-address check: the flood met a
// full gateway, 503, and so could the other client.)
func TestRefusedRequestHoldsNoSlot(t *testing.T) {
	const (
		flooders = 8
		floods   = 2000 // requests per flooder
		goods    = 2000 // requests of the other client
	)
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	for _, tc := range []struct {
		name     string
		opts     Options
		listener int    // the flood's listener's SetLimit
		want     string // what the flood meets
	}{
		{"per address", Options{MaxRequests: 2, MaxRequestsPerIP: 1}, 0, metrics.RefusedPerIP},
		{"listener", Options{MaxRequests: 2, MaxRequestsPerIP: -1}, 1, metrics.RefusedListener},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := New(tc.opts, metrics.NewEdge(prometheus.NewRegistry()))
			flood, other := g.Wrap(nil), g.Wrap(nil)
			flood.SetLimit(tc.listener)
			if got := flood.EnterRequest(a); got != "" { // the flood's one admitted request
				t.Fatalf("first request from %v: %q", a, got)
			}
			var wg sync.WaitGroup
			var wrong atomic.Int64 // flood requests admitted or refused by another level
			for range flooders {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range floods {
						if got := flood.EnterRequest(a); got != tc.want {
							wrong.Add(1)
							if got == "" {
								flood.LeaveRequest(a)
							}
						}
					}
				}()
			}
			refused := map[string]int{}
			for range goods {
				if got := other.EnterRequest(b); got != "" {
					refused[got]++
					continue
				}
				other.LeaveRequest(b)
			}
			wg.Wait()
			if len(refused) != 0 || wrong.Load() != 0 {
				t.Fatalf("the other client refused %v of %d times; %d flood requests not refused %q", refused, goods, wrong.Load(), tc.want)
			}
			flood.LeaveRequest(a)
			if g.InFlight() != 0 {
				t.Fatalf("in flight %d after leaving", g.InFlight())
			}
		})
	}
}

func TestRemoteIP(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.1:5":          "10.0.0.1",
		"[::ffff:10.0.0.1]:5": "10.0.0.1",
		"[2001:db8::1]:443":   "2001:db8::1",
		"garbage":             "invalid IP",
		// The IPv4 fast path (parseIPv4Port) and what it leaves to the
		// full parse.
		"127.0.0.1:54321":       "127.0.0.1",
		"255.255.255.255:65535": "255.255.255.255",
		"0.0.0.0:0":             "0.0.0.0",
		"1.2.3.4:080":           "1.2.3.4", // ParseUint takes leading zeros
		"1.2.3.4:000080":        "1.2.3.4", // six digits: the full parse's
		"1.2.3.4:65536":         "invalid IP",
		"1.2.3.4:":              "invalid IP",
		"1.2.3.4":               "invalid IP",
		"1.2.3.04:5":            "invalid IP",
		"1.2.3.256:5":           "invalid IP",
		"1.2.3.1000:5":          "invalid IP",
		"1.2.3:5":               "invalid IP",
		"1.2.3.4.5:6":           "invalid IP",
		"1.2.3.4:+5":            "invalid IP",
		"1.2.3.4:5x":            "invalid IP",
		"[1.2.3.4]:5":           "invalid IP",
	} {
		if got := RemoteIP(in).String(); got != want {
			t.Errorf("RemoteIP(%q) = %s, want %s", in, got, want)
		}
	}
}

// FuzzRemoteIP holds the IPv4 fast path to netip.ParseAddrPort: whatever
// it accepts, the full parse accepts with the same address.
func FuzzRemoteIP(f *testing.F) {
	for _, s := range []string{"10.0.0.1:5", "127.0.0.1:54321", "1.2.3.04:5", "1.2.3.4:65536", "[::1]:80", "1.2.3.4:000080"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ip, ok := parseIPv4Port(s)
		ap, err := netip.ParseAddrPort(s)
		if ok && (err != nil || ap.Addr().Unmap() != ip) {
			t.Fatalf("parseIPv4Port(%q) = %v; ParseAddrPort: %v, %v", s, ip, ap, err)
		}
		want := netip.Addr{}
		if err == nil {
			want = ap.Addr().Unmap()
		}
		if got := RemoteIP(s); got != want {
			t.Fatalf("RemoteIP(%q) = %v, want %v", s, got, want)
		}
	})
}

// inFlightGauge is what infergate_edge_requests_in_flight reads now.
func inFlightGauge(t *testing.T, m *metrics.Edge) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.RequestsInFlight.Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetGauge().GetValue()
}

func BenchmarkRemoteIP(b *testing.B) {
	for range b.N {
		_ = RemoteIP("127.0.0.1:54321")
	}
}
