package admission

import (
	"net/netip"

	"github.com/infergate/infergate/metrics"
)

// Why requests are admitted too: connections are admitted at accept, but
// one HTTP/2 connection carries many requests at once and each request in
// flight holds an engine connection. Counting connections only let 20
// clients open thousands of engine sockets. Every request in flight (an
// HTTP/2 stream, or the one request of an HTTP/1.1 connection) therefore
// also takes a slot under caps that mirror the connection caps: global
// (Options.MaxRequests), per source address (MaxRequestsPerIP) and per
// listener (the same SetLimit as its connections: a rule's connectionLimit
// bounds its concurrency whatever the protocol). An HTTP/1.1 request runs
// on an admitted connection, so with the derived defaults it always fits;
// only streams beyond them are refused.

// requestState is the gate's count of requests in flight.
type requestState struct {
	global int        // resolved cap; 0: none
	perIP  addrShares // requests per source address, under the resolved per-address cap
}

// EnterRequest takes a request slot for a request from ip on l, or
// returns the refusing level's reason (metrics.Refused*). Every admitted
// request must be followed by exactly one LeaveRequest with the same ip.
//
// Each level's slot is an optimistic add, given back on refusal (no cap is
// ever passed), taken narrowest first: the address's share, then the
// listener's, then the gateway's. So a request refused at one level has
// held, for that instant, only slots of levels narrower than it, never one
// that requests from other addresses need. Taken widest first, the global
// count held every request about to be refused per address: a flood of
// HTTP/2 streams from one address, each queued on the per-address lock with a global
// slot, met a full gateway (503) instead of its own share (429), and so
// could requests from other addresses.
func (l *Listener) EnterRequest(ip netip.Addr) string {
	g := l.g
	if !g.reqs.perIP.take(ip) {
		return g.refuseRequest(metrics.RefusedPerIP)
	}
	if lim := l.limit.Load(); l.reqOpen.Add(1) > lim && lim > 0 {
		l.reqOpen.Add(-1)
		g.reqs.perIP.give(ip)
		return g.refuseRequest(metrics.RefusedListener)
	}
	if lim := int64(g.reqs.global); g.inflight.Add(1) > lim && lim > 0 {
		g.inflight.Add(-1)
		l.reqOpen.Add(-1)
		g.reqs.perIP.give(ip)
		return g.refuseRequest(metrics.RefusedGlobal)
	}
	return ""
}

// LeaveRequest gives back the slot EnterRequest took.
func (l *Listener) LeaveRequest(ip netip.Addr) {
	l.g.inflight.Add(-1)
	l.reqOpen.Add(-1)
	l.g.reqs.perIP.give(ip)
}

// CountsPerIP reports whether requests are counted per source address
// (a per-address request cap is set): without one, EnterRequest and
// LeaveRequest ignore their address, which the caller need not parse.
func (l *Listener) CountsPerIP() bool { return l.g.reqs.perIP.counts() }

// InFlight is the number of requests admitted and not yet left.
func (g *Gate) InFlight() int { return int(g.inflight.Load()) }

func (g *Gate) refuseRequest(reason string) string {
	if g.m != nil {
		g.m.RequestsRefused.WithLabelValues(reason).Inc()
	}
	return reason
}

// RemoteIP is the source address of a request's RemoteAddr ("ip:port") in
// the form the caps count it (IPv4-mapped addresses as IPv4); unknown
// addresses share the zero Addr's bucket, as at accept.
func RemoteIP(remoteAddr string) netip.Addr {
	if ip, ok := parseIPv4Port(remoteAddr); ok {
		return ip
	}
	if ap, err := netip.ParseAddrPort(remoteAddr); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

// parseIPv4Port reads "a.b.c.d:port", the usual RemoteAddr, in one pass:
// four decimal fields of 0-255 without leading zeros, a colon and a port
// of 1-5 digits up to 65535. It accepts only strings netip.ParseAddrPort
// accepts, with the same address; ok false is anything else, which
// RemoteIP then parses in full. Why: ParseAddrPort's general parse was
// ~630 instructions of a small request (callgrind), this ~100.
func parseIPv4Port(s string) (ip netip.Addr, ok bool) {
	var a [4]byte
	f, v, digits := 0, 0, 0 // the field, its value, its digits so far
	i := 0
	for ; i < len(s); i++ {
		c := s[i]
		if d := c - '0'; d <= 9 {
			if digits > 0 && v == 0 { // a leading zero
				return netip.Addr{}, false
			}
			v = v*10 + int(d)
			if v > 255 {
				return netip.Addr{}, false
			}
			digits++
			continue
		}
		if digits == 0 || (c != '.' && c != ':') || (c == '.') == (f == 3) {
			return netip.Addr{}, false
		}
		a[f&3] = byte(v)
		f, v, digits = f+1, 0, 0
		if c == ':' {
			break
		}
	}
	port := s[min(i+1, len(s)):]
	if f != 4 || len(port) == 0 || len(port) > 5 {
		return netip.Addr{}, false
	}
	p := 0
	for k := 0; k < len(port); k++ {
		d := port[k] - '0'
		if d > 9 {
			return netip.Addr{}, false
		}
		p = p*10 + int(d)
	}
	if p > 65535 {
		return netip.Addr{}, false
	}
	return netip.AddrFrom4(a), true
}
