package daemon

import (
	"net"
	"net/netip"
	"strconv"
)

// apiAddrPorts is the management API's address as the datapath's
// GatewayAddrs (an endpoint equal to it would send data requests to the
// API): the listener's when one is given, else APIAddr ("" host or a name
// that is not an IP literal: unspecified, i.e. every local address).
// Nothing when it cannot be parsed: the API's own listen reports that.
func apiAddrPorts(opts Options) []netip.AddrPort {
	addr := opts.APIAddr
	if opts.APIListener != nil {
		addr = opts.APIListener.Addr().String()
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return nil
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		a = netip.IPv6Unspecified() // "" or a hostname: treat as every local address
	}
	return []netip.AddrPort{netip.AddrPortFrom(a.Unmap(), uint16(p))}
}
