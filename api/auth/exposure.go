package auth

import (
	"fmt"
	"net/netip"
)

// IsLoopbackAddr reports whether a listen address (host:port) is reachable
// only from this host: a loopback IP or localhost. "", 0.0.0.0 and [::]
// listen everywhere; any other name may resolve anywhere.
func IsLoopbackAddr(listenAddr string) bool {
	host := normName(hostOnly(listenAddr))
	if host == localhostName {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// CheckExposure refuses a management API off loopback without a token file,
// unless the operator insists (Insecure); warning is then the sentence to
// log loudly. Management changes need a credential once the API leaves
// loopback.
func CheckExposure(listenAddr string, o Options) (warning string, err error) {
	if o.TokenFile != "" || IsLoopbackAddr(listenAddr) {
		return "", nil
	}
	if !o.Insecure {
		return "", fmt.Errorf("auth: refusing to serve the management API on %s without a token: "+
			"anyone who can reach it could change every rule; pass --api-token-file FILE "+
			"(see README, \"Management API access\"), listen on 127.0.0.1, "+
			"or pass --insecure-api to accept the risk", listenAddr)
	}
	return fmt.Sprintf("INSECURE: the management API on %s accepts rule changes from anyone who can reach it "+
		"(--insecure-api without --api-token-file); use --api-token-file in production", listenAddr), nil
}
