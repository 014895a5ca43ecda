// Package auth decides who may use the management API: bearer tokens read
// from an operator's token file (read-only or read-write), a Host header
// allowlist against DNS rebinding, and the rule that a management API off
// loopback needs a credential.
//
// Contract:
//   - A token is a secret type (Token): it prints and marshals as
//     "[redacted]", is kept in memory only as a SHA-256 digest and is compared
//     in constant time against every configured digest (no early exit, no
//     length leak). Nothing in this package logs a token or a token line.
//   - The token file is reloaded on SIGHUP and when its content changes
//     (polled, so a Kubernetes secret's symlink swap is seen too). A reload
//     that fails (missing file, bad line, no token) keeps the tokens in force
//     and reports the error: a typo during rotation never locks operators out
//     and never opens the API.
//   - Guard.Check is the one decision point; it returns an *apierror.Error in
//     the API's error shape with a stable code (unauthorized,
//     token_read_only, host_not_allowed) so handlers and clients key off
//     codes, never messages.
//   - Without a token file every request that passes the Host check is
//     allowed: the default loopback-only API keeps working without setup.
//     CheckExposure refuses to serve that configuration off loopback.
//
// Token file format (one token per line):
//
//	# comment lines and blank lines are ignored
//	rw:<token>   # read-write: every route (the default without a prefix)
//	ro:<token>   # read-only: GET/HEAD routes and POST …/explain
//	<token>      # same as rw:
//
// A token is 16 to 4096 characters of the RFC 6750 token alphabet
// (A-Z a-z 0-9 - . _ ~ + / and trailing =); `openssl rand -hex 32` makes one.
// Text after the token that starts with '#' is a comment (name the token's
// owner or its expiry there).
package auth
