package admission

import (
	"net/netip"
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
	}{
		{"global", Options{MaxRequests: 2}, 0, []netip.Addr{a, b, b}, []string{"", "", metrics.RefusedGlobal}},
		{"global follows MaxConns", Options{MaxConns: 2}, 0, []netip.Addr{a, b, a}, []string{"", "", metrics.RefusedGlobal}},
		{"negative is no cap", Options{MaxConns: 1, MaxRequests: -1}, 0, []netip.Addr{a, a, a}, []string{"", "", ""}},
		{"per ip", Options{MaxRequestsPerIP: 2}, 0, []netip.Addr{a, a, a, b}, []string{"", "", metrics.RefusedPerIP, ""}},
		{"per ip follows MaxConnsPerIP", Options{MaxConnsPerIP: 1}, 0, []netip.Addr{a, a, b}, []string{"", metrics.RefusedPerIP, ""}},
		{"listener (connectionLimit)", Options{}, 2, []netip.Addr{a, b, b}, []string{"", "", metrics.RefusedListener}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := metrics.NewEdge(prometheus.NewRegistry())
			g := New(tc.opts, m)
			l := g.Wrap(nil)
			l.SetLimit(tc.listener)
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
			if g.InFlight() != 0 || l.reqOpen.Load() != 0 || len(g.reqs.perIP) != 0 {
				t.Fatalf("after leaving: global %d listener %d per-ip %v", g.InFlight(), l.reqOpen.Load(), g.reqs.perIP)
			}
			// Every slot is free again: the first request is admitted.
			if got := l.EnterRequest(tc.enters[0]); got != "" {
				t.Fatalf("after leaving: %q", got)
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
	} {
		if got := RemoteIP(in).String(); got != want {
			t.Errorf("RemoteIP(%q) = %s, want %s", in, got, want)
		}
	}
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
