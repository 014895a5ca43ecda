package admission

import (
	"net"
	"net/netip"
	"testing"
)

func TestSource(t *testing.T) {
	for _, tc := range []struct {
		ip   string
		want string // "" : not a source
	}{
		{"192.0.2.7", "192.0.2.7/32"},
		{"::ffff:192.0.2.7", "192.0.2.7/32"},
		{"2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"},
		{"2001:db8:1:2::9", "2001:db8:1:2::/64"},
		{"fe80::1%eth0", "fe80::/64"},
		{"", ""},
	} {
		var ip netip.Addr
		if tc.ip != "" {
			ip = netip.MustParseAddr(tc.ip)
		}
		got, ok := Source(ip)
		if (tc.want == "") == ok || (ok && got.String() != tc.want) {
			t.Errorf("Source(%q) = %v, %v; want %q", tc.ip, got, ok, tc.want)
		}
	}
}

func TestAddrIP(t *testing.T) {
	for _, tc := range []struct {
		name string
		addr net.Addr
		want string // "" : no IP
	}{
		{"tcp4", &net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 1}, "192.0.2.7"},
		{"tcp mapped", &net.TCPAddr{IP: net.ParseIP("::ffff:192.0.2.7"), Port: 1}, "192.0.2.7"},
		{"tcp6", &net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 1}, "2001:db8::1"},
		{"udp", &net.UDPAddr{IP: net.ParseIP("192.0.2.8"), Port: 1}, "192.0.2.8"},
		{"unix", &net.UnixAddr{Name: "/run/x.sock", Net: "unix"}, ""},
		{"nil", nil, ""},
	} {
		got := AddrIP(tc.addr)
		if (tc.want == "" && got.IsValid()) || (tc.want != "" && got.String() != tc.want) {
			t.Errorf("%s: AddrIP(%v) = %v, want %q", tc.name, tc.addr, got, tc.want)
		}
	}
}
