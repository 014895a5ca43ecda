package admission

import (
	"net"
	"net/netip"
)

// IPv6SourceBits is the prefix an IPv6 client is limited by: a /64 is what
// one subscriber is given, so a client rotating through its own /64 is
// still one source.
const IPv6SourceBits = 64

// Source is the client source a per-source rate (TLS handshakes, failed
// API-key checks) counts ip under: the address itself for IPv4 (and
// IPv4-mapped IPv6), its /64 for IPv6, without a zone. ok is false for an
// invalid address.
func Source(ip netip.Addr) (src netip.Prefix, ok bool) {
	if !ip.IsValid() {
		return netip.Prefix{}, false
	}
	ip = ip.Unmap().WithZone("")
	bits := 32
	if ip.Is6() {
		bits = IPv6SourceBits
	}
	p, err := ip.Prefix(bits)
	return p, err == nil
}

// AddrIP is the IP of a network address, IPv4-mapped IPv6 unmapped; the
// zero Addr when it has none (a unix socket, nil).
func AddrIP(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(ta.IP); ok {
			return ip.Unmap()
		}
	}
	if a == nil {
		return netip.Addr{}
	}
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}
