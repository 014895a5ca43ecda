package daemon

import (
	"net/netip"
	"slices"
	"testing"
)

func TestAPIAddrPorts(t *testing.T) {
	for _, tc := range []struct {
		addr string
		want []netip.AddrPort
	}{
		{"127.0.0.1:11111", []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:11111")}},
		{":11111", []netip.AddrPort{netip.MustParseAddrPort("[::]:11111")}},
		{"localhost:8080", []netip.AddrPort{netip.MustParseAddrPort("[::]:8080")}},
		{"[::ffff:10.0.0.1]:80", []netip.AddrPort{netip.MustParseAddrPort("10.0.0.1:80")}},
		{"nonsense", nil},
		{"127.0.0.1:0", nil},
	} {
		if got := apiAddrPorts(Options{APIAddr: tc.addr}); !slices.Equal(got, tc.want) {
			t.Errorf("apiAddrPorts(%q) = %v, want %v", tc.addr, got, tc.want)
		}
	}
}
