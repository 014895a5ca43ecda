package auth

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// localhostName and localhostSuffix are the loopback names of RFC 6761:
// browsers resolve them to loopback themselves, so DNS cannot rebind them.
const (
	localhostName   = "localhost"
	localhostSuffix = ".localhost"
	wildcardPrefix  = "*."
)

// HostPolicy is the DNS rebinding defence: a browser page at
// http://attacker.example:11111 whose name the attacker re-points at
// 127.0.0.1 reaches the API with "Host: attacker.example", so a request is
// served only when its Host names this API. Allowed are
//   - IP literals that are loopback or the listen address (any IP literal
//     when the API listens on a wildcard address: it is then every local
//     address). A literal cannot be rebound, and a page served from it is
//     the API's own origin;
//   - localhost and *.localhost;
//   - the listen address's name, if it was given as one, and AllowedHosts
//     (names, *.domain wildcards, or IP literals such as a Service address
//     that forwards to a specific listen IP).
//
// The port is ignored: a rebinding page must already use the API's port.
type HostPolicy struct {
	listen   netip.Addr // valid when the API listens on one specific IP
	anyIP    bool       // listening on 0.0.0.0 / [::]
	names    map[string]bool
	ips      map[netip.Addr]bool // allowed IP literals (a Service or NAT address)
	suffixes []string            // from "*.example.com": ".example.com"
}

// NewHostPolicy builds the policy for an API listening on listenAddr
// (host:port) that also answers to allowed names.
func NewHostPolicy(listenAddr string, allowed []string) (HostPolicy, error) {
	p := HostPolicy{names: map[string]bool{}, ips: map[netip.Addr]bool{}}
	host := hostOnly(listenAddr)
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.IsUnspecified() {
			p.anyIP = true
		} else {
			p.listen = ip.Unmap()
		}
	} else if host == "" {
		p.anyIP = true // ":11111" listens everywhere
	} else {
		p.names[normName(host)] = true
	}
	for _, a := range allowed {
		n := normName(hostOnly(strings.TrimSpace(a)))
		if ip, err := netip.ParseAddr(n); err == nil {
			p.ips[ip.Unmap()] = true
			continue
		}
		switch {
		case n == "":
			continue
		case strings.HasPrefix(n, wildcardPrefix) && len(n) > len(wildcardPrefix):
			p.suffixes = append(p.suffixes, n[1:])
		case strings.ContainsAny(n, "*/ "):
			return HostPolicy{}, fmt.Errorf("allowed host %q: want a DNS name or *.domain", a)
		default:
			p.names[n] = true
		}
	}
	return p, nil
}

// Allowed reports whether a request whose Host header is hostHeader is
// addressed to this API.
func (p HostPolicy) Allowed(hostHeader string) bool {
	host := normName(hostOnly(hostHeader))
	if host == "" {
		return false // browsers always send Host; no name, no answer
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		ip = ip.Unmap()
		return ip.IsLoopback() || p.anyIP || (p.listen.IsValid() && ip == p.listen) || p.ips[ip]
	}
	if host == localhostName || strings.HasSuffix(host, localhostSuffix) || p.names[host] {
		return true
	}
	for _, s := range p.suffixes {
		if strings.HasSuffix(host, s) {
			return true
		}
	}
	return false
}

// hostOnly strips a port and IPv6 brackets.
func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
}

// normName lower-cases and drops a trailing root dot ("LocalHost." is
// localhost) and an IPv6 zone.
func normName(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	s = strings.TrimSuffix(s, ".")
	if i := strings.IndexByte(s, '%'); i >= 0 {
		s = s[:i]
	}
	return s
}
