package rules

import (
	"fmt"
	"net/netip"

	"github.com/infergate/infergate/apierror"
)

// checkEndpointNotOwnVIP refuses an endpoint that is the rule's own VIP:port
// (or a secondary VIP on its port; any loopback address on the port when
// the VIP is unspecified): one request would loop through the gateway until
// its connections ran out. Other rules' VIPs and the management API are
// the datapath's to check at install, which knows them.
func checkEndpointNotOwnVIP(r *Rule) *apierror.Error {
	sa := &r.ServiceArguments
	vip, ok := ParseIPLiteral(sa.ExternalIP)
	if !ok {
		return nil // the field pass reports it
	}
	own := []netip.Addr{vip}
	for _, sv := range r.SecondaryVIPs {
		if a, ok := ParseIPLiteral(sv.Address); ok {
			own = append(own, a)
		}
	}
	for i, ep := range r.Endpoints {
		a, ok := ParseIPLiteral(ep.EndpointIP)
		if !ok || ep.TargetPort != sa.Port {
			continue
		}
		for _, v := range own {
			if a == v || (v.IsUnspecified() && (a.IsLoopback() || a.IsUnspecified())) {
				msg := fmt.Sprintf("endpoint %s is this rule's own address: requests would loop through the gateway", netip.AddrPortFrom(a, uint16(ep.TargetPort)))
				return apierror.BadRequest(apierror.CodeEndpointIsGateway, epPath(i, fieldEndpointIP), msg, msg)
			}
		}
	}
	return nil
}
