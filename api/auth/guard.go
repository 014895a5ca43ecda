package auth

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/infergate/infergate/apierror"
)

// Stable error codes of refused requests; clients key off them.
const (
	CodeUnauthorized   = "unauthorized"     // no token, or a token that is not configured
	CodeReadOnlyToken  = "token_read_only"  // a read-only token on a route that changes state
	CodeHostNotAllowed = "host_not_allowed" // Host is not this API (DNS rebinding)
)

// Reasons label refusals in metrics.
const (
	ReasonHostNotAllowed = "host_not_allowed"
	ReasonMissingToken   = "missing_token"
	ReasonInvalidToken   = "invalid_token"
	ReasonReadOnly       = "read_only"
)

// Realm is the WWW-Authenticate realm.
const Realm = "infergate"

const (
	bearerScheme = "bearer"
	// maxEchoedHost bounds the Host echoed in an error message.
	maxEchoedHost = 128
)

// Access is what a route needs.
type Access int

const (
	// AccessProbe needs nothing: /healthz and /readyz must answer any load
	// balancer or kubelet, whatever Host it sends.
	AccessProbe Access = iota
	// AccessPublic needs only a Host naming this API (the Swagger UI and
	// its document: the page must load before a user can paste a token).
	AccessPublic
	// AccessRead needs a read-only or read-write token.
	AccessRead
	// AccessWrite needs a read-write token.
	AccessWrite
)

// Denial is a refused request: Err in the API's error shape, Challenge the
// WWW-Authenticate value ("" for none), Reason the metric label.
type Denial struct {
	Err       *apierror.Error
	Challenge string
	Reason    string
}

// Guard decides whether a request may reach a route.
type Guard struct {
	hosts       HostPolicy
	tokens      *Verifier // nil: no token file
	openMetrics bool
}

// NewGuard builds the guard of an API listening on listenAddr. It loads the
// token file (failing if it is unusable) but does not check exposure; call
// CheckExposure before listening.
func NewGuard(listenAddr string, o Options) (*Guard, error) {
	hosts, err := NewHostPolicy(listenAddr, o.AllowedHosts)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	g := &Guard{hosts: hosts, openMetrics: o.OpenMetrics}
	if o.TokenFile != "" {
		if g.tokens, err = NewVerifier(o.TokenFile); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// Verifier is the token file's verifier (nil without one), for reloads.
func (g *Guard) Verifier() *Verifier { return g.tokens }

// MetricsAccess is what /metrics needs.
func (g *Guard) MetricsAccess() Access {
	if g.openMetrics {
		return AccessPublic
	}
	return AccessRead
}

// Check returns nil when a request with this Host and Authorization header
// may use a route that needs need.
func (g *Guard) Check(host, authorization string, need Access) *Denial {
	if need == AccessProbe {
		return nil
	}
	if !g.hosts.Allowed(host) {
		return &Denial{Reason: ReasonHostNotAllowed, Err: apierror.New(http.StatusForbidden, CodeHostNotAllowed, "",
			"Forbidden", fmt.Sprintf("Host %q is not an address or name of this API (DNS rebinding defence); "+
				"connect by IP address or localhost, or allow the name with --api-allowed-host", clip(host)))}
	}
	if need == AccessPublic || g.tokens == nil {
		return nil
	}
	tok, ok := bearer(authorization)
	if !ok {
		reason := ReasonMissingToken
		msg := "this API needs a bearer token: send \"Authorization: Bearer <token>\" " +
			"(CLI: --token-file FILE or INFERGATE_TOKEN; Swagger UI: Authorize)"
		challenge := `Bearer realm="` + Realm + `"`
		if authorization != "" {
			reason = ReasonInvalidToken
			msg = "the Authorization header is not \"Bearer <token>\""
			challenge += `, error="invalid_request"`
		}
		return &Denial{Reason: reason, Challenge: challenge,
			Err: apierror.New(http.StatusUnauthorized, CodeUnauthorized, "", "Unauthorized", msg)}
	}
	kind, ok := g.tokens.Lookup(tok)
	if !ok {
		return &Denial{Reason: ReasonInvalidToken, Challenge: `Bearer realm="` + Realm + `", error="invalid_token"`,
			Err: apierror.New(http.StatusUnauthorized, CodeUnauthorized, "", "Unauthorized",
				"the bearer token is not valid here (mistyped, or rotated out of the gateway's token file)")}
	}
	if need == AccessWrite && kind != ReadWrite {
		return &Denial{Reason: ReasonReadOnly, Challenge: `Bearer realm="` + Realm + `", error="insufficient_scope"`,
			Err: apierror.New(http.StatusForbidden, CodeReadOnlyToken, "", "Forbidden",
				"this token is read-only; changing rules needs a read-write (rw:) token")}
	}
	return nil
}

// bearer extracts the token of an RFC 6750 "Bearer <token>" header.
func bearer(h string) (Token, bool) {
	scheme, rest, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, bearerScheme) {
		return Token{}, false
	}
	rest = strings.TrimSpace(rest)
	if rest == "" {
		return Token{}, false
	}
	return NewToken(rest), true
}

func clip(s string) string {
	if len(s) > maxEchoedHost {
		return s[:maxEchoedHost] + "…"
	}
	return s
}
