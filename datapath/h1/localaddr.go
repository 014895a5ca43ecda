package h1

import "net"

// localAddr is a connection's local address with its text made once: the
// access log names the VIP of every request, and net.TCPAddr.String
// allocates each time it is asked.
type localAddr struct {
	net.Addr
	text string
}

func newLocalAddr(a net.Addr) net.Addr {
	if a == nil {
		return nil
	}
	return &localAddr{Addr: a, text: a.String()}
}

// String is the address's own String, computed when the connection came.
func (a *localAddr) String() string { return a.text }
