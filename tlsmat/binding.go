package tlsmat

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
)

// Why a binding: SNI picks the certificate and the client-certificate
// policy at the handshake, but the rule a request reaches is matched later
// by Host (HTTP/1.1) or :authority (HTTP/2), which the client may set to
// any name. Without a check, a client that says SNI "b" (an open site) and
// Host "a" (a site requiring client certificates) reaches a's engine
// without ever showing a certificate. The Frontend therefore records, per
// connection, the site its handshake ran under, and Misdirected compares it
// with the site of the rule each request matched.

// Misdirected reasons (label "reason" of infergate_tls_misdirected_requests_total).
const (
	// MisdirectedCertificate: the handshake named (by SNI) another rule's
	// certificate than the matched rule's.
	MisdirectedCertificate = "certificate"
	// MisdirectedClientCert: the matched rule's client-certificate policy
	// is not the one the handshake enforced.
	MisdirectedClientCert = "client_cert_policy"
	// MisdirectedNoHandshake: no handshake record for the connection (fail
	// closed; not expected on a TLS listener).
	MisdirectedNoHandshake = "no_handshake"
)

// handshake is what one connection's TLS handshake ran under. Written once
// by GetConfigForClient (connection goroutine, before any request), read
// by the request handlers.
type handshake struct {
	site   atomic.Pointer[Site]
	byName atomic.Bool // SNI named the site; false: VIP default (no or unknown SNI)
}

type handshakeKey struct{}

// ConnContext prepares a connection's context to record its handshake: set
// it as the http.Server's ConnContext. net/http runs the handshake with this
// context, and every request's context derives from it (HTTP/1.1 and h2).
func (f *Frontend) ConnContext(ctx context.Context, _ net.Conn) context.Context {
	return context.WithValue(ctx, handshakeKey{}, &handshake{})
}

// record notes the site chosen for a handshake whose context came from
// ConnContext (a no-op otherwise).
func record(ctx context.Context, s *Site, byName bool) {
	if ctx == nil {
		return
	}
	if h, ok := ctx.Value(handshakeKey{}).(*handshake); ok {
		h.site.Store(s)
		h.byName.Store(byName)
	}
}

// Misdirected reports why the request r, which matched a rule whose server
// side is rule, must not be served on this connection ("" = it may). The
// rule:
//   - the client-certificate policy the handshake enforced must be the
//     rule's, unless the rule has none (a client certificate verified by a
//     stricter site does no harm to an open rule);
//   - when the client named a site by SNI, its certificate must be the
//     rule's, unless the rule has no host (it serves every name);
//   - without SNI (or with a name no rule has) the VIP default site
//     applied: only the client-certificate policy is compared, so clients
//     that connect by IP address keep working on open rules.
//
// Sites are compared by their settings, not by identity, so a rule update
// that leaves the TLS settings alone does not misdirect open connections,
// and one that tightens them does. A refusal is counted by reason.
func (f *Frontend) Misdirected(r *http.Request, rule ServerParams) string {
	reason := misdirected(r.Context(), rule)
	if reason != "" {
		f.m.Misdirected.WithLabelValues(f.listen, reason).Inc()
	}
	return reason
}

func misdirected(ctx context.Context, rule ServerParams) string {
	h, _ := ctx.Value(handshakeKey{}).(*handshake)
	if h == nil || h.site.Load() == nil {
		return MisdirectedNoHandshake
	}
	hs := h.site.Load().params
	if rule.Client != nil && !sameClientAuth(hs.Client, rule.Client) {
		return MisdirectedClientCert
	}
	if h.byName.Load() && rule.CertHost != "" && !strings.EqualFold(hs.CertHost, rule.CertHost) {
		return MisdirectedCertificate
	}
	return ""
}

// sameClientAuth reports whether two client-certificate policies verify
// the same way (mode, trust, name pattern, revocation list).
func sameClientAuth(a, b *ClientAuth) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
