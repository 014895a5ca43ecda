package datapath

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/spec"
)

// checkEndpointsNotGatewayLocked refuses a rule with an endpoint that is
// the gateway itself: a VIP:port it serves (any rule's, or this rule's own
// addresses) or one of Options.GatewayAddrs (the management API). Such an
// endpoint sends each request back through the gateway, hop after hop,
// until the gateway's connections run out. An address bound unspecified
// (0.0.0.0:port, [::]:port) is every local address on that port.
// Control plane (rt.mu).
func (rt *Runtime) checkEndpointsNotGatewayLocked(r *spec.Rule) *apierror.Error {
	own := make([]netip.AddrPort, 0, len(rt.listeners)+len(rt.opts.GatewayAddrs)+1+len(r.SecondaryVIPs))
	for a := range rt.listeners {
		own = append(own, a)
	}
	own = append(own, rt.opts.GatewayAddrs...)
	own = append(own, r.ServedAddrs()...)
	var local localAddrs
	for i, ep := range r.Endpoints {
		for _, a := range own {
			if loopsTo(ep.Addr, a, &local) {
				return apierror.BadRequest(apierror.CodeEndpointIsGateway, fmt.Sprintf("endpoints[%d].endpointIP", i), "",
					fmt.Sprintf("endpoint %s is the gateway's own address %s: requests would loop through the gateway", ep.Addr, a))
			}
		}
	}
	return nil
}

// loopsTo reports whether a connection to ep reaches the gateway socket
// bound at own.
func loopsTo(ep, own netip.AddrPort, local *localAddrs) bool {
	if ep.Port() != own.Port() {
		return false
	}
	e, o := ep.Addr().Unmap(), own.Addr().Unmap()
	if e == o {
		return true
	}
	if !o.IsUnspecified() {
		return false
	}
	return e.IsLoopback() || e.IsUnspecified() || local.has(e)
}

// localAddrs is this host's interface addresses, read once per check and
// only when an unspecified bind makes them matter.
type localAddrs struct {
	read  bool
	addrs []netip.Addr
}

func (l *localAddrs) has(a netip.Addr) bool {
	if !l.read {
		l.read = true
		if ifs, err := net.InterfaceAddrs(); err == nil {
			for _, ia := range ifs {
				if p, err := netip.ParsePrefix(ia.String()); err == nil {
					l.addrs = append(l.addrs, p.Addr().Unmap())
				}
			}
		}
	}
	for _, x := range l.addrs {
		if x == a {
			return true
		}
	}
	return false
}
