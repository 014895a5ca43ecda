package h1

import "net/netip"

// RemoteIP is the request's client address as Server.RemoteIP parsed it
// from the connection's RemoteAddr (which is the request's RemoteAddr),
// once per connection; ok is false when the server has no RemoteIP.
func (w *response) RemoteIP() (ip netip.Addr, ok bool) {
	return w.c.ip, w.c.hasIP
}
