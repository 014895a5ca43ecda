package validate

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/infergate/infergate/tenant"
)

// apiKeys checks tenant API-key enforcement (docs/tenants.md) on the VIP: a
// request without a key is refused 401 invalid_api_key, one with a wrong
// secret too, and the given key is admitted through both headers clients
// use. Whether the rule enforces keys is read off the keyless answer (an
// sse_mode rule enforces only with the daemon's --sse-mode-enforces-keys),
// and checked against api_key_auth: required. The key is never printed.
func (w *workflow) apiKeys(ctx context.Context, res *StepResult) {
	declared := w.rule.ServiceArguments.APIKeyAuth
	none := w.sendAuth(ctx, w.opts.Path, "key check", false, bearer(""))
	if none.status == 0 {
		res.Status, res.Summary = Fail, "the VIP did not answer"
		res.Evidence = append(res.Evidence, fmt.Sprintf("without a key: %v", none.err))
		return
	}
	res.Evidence = append(res.Evidence, fmt.Sprintf("without a key: HTTP %d %s", none.status, dash(none.errCode)))
	enforced := none.status == http.StatusUnauthorized && none.errCode == tenant.CodeInvalidAPIKey
	switch {
	case !enforced && declared == "required":
		res.Status = Fail
		res.Summary = fmt.Sprintf("the rule has api_key_auth: required but a request without a key got HTTP %d", none.status)
		return
	case !enforced:
		res.Status = Skip
		res.Summary = fmt.Sprintf("the rule does not enforce API keys (api_key_auth %q)", declared)
		return
	case w.opts.APIKey == "":
		res.Status = Warn
		res.Summary = "keys are enforced (no key: 401 invalid_api_key); give --api-key (or INFERGATE_VALIDATE_API_KEY) to check that a key is admitted"
		return
	}
	type check struct {
		what string
		auth func(http.Header)
		ok   func(probeResult) bool
		want string
	}
	key := w.opts.APIKey
	checks := []check{
		{"wrong secret", bearer(wrongSecret(key)), func(r probeResult) bool {
			return r.status == http.StatusUnauthorized && r.errCode == tenant.CodeInvalidAPIKey
		}, "401 invalid_api_key"},
		{"Authorization: Bearer", bearer(key), func(r probeResult) bool { return r.status == http.StatusOK }, "200"},
		{"X-Api-Key", func(h http.Header) { h.Set("X-Api-Key", key) }, func(r probeResult) bool { return r.status == http.StatusOK }, "200"},
	}
	var bad []string
	for _, c := range checks {
		r := w.sendAuth(ctx, w.opts.Path, "key check", false, c.auth)
		line := fmt.Sprintf("%s (%s…): HTTP %d %s", c.what, keyPrefix(key), r.status, dash(r.errCode))
		if r.rateLimit != "" {
			line += " with x-ratelimit-* headers"
		}
		res.Evidence = append(res.Evidence, line)
		if !c.ok(r) {
			bad = append(bad, fmt.Sprintf("%s got HTTP %d %s, want %s", c.what, r.status, r.errCode, c.want))
		}
	}
	if len(bad) > 0 {
		res.Status, res.Summary = Fail, strings.Join(bad, "; ")
		return
	}
	res.Status = Pass
	res.Summary = "no key and a wrong secret: 401 invalid_api_key; the key is admitted with Bearer and X-Api-Key" +
		" (the gateway strips the key header before the engine; not observable from here)"
}

// keyPrefix is the printable part of a key (lxb_<id>_), never its secret.
func keyPrefix(key string) string {
	if i := strings.LastIndexByte(key, '_'); i > 0 {
		return key[:i+1]
	}
	return "lxb_"
}

// wrongSecret is key with the last character of its secret changed.
func wrongSecret(key string) string {
	if key == "" {
		return "lxb_0000000000000000_x"
	}
	last := key[len(key)-1]
	repl := byte('A')
	if last == 'A' {
		repl = 'B'
	}
	return key[:len(key)-1] + string(repl)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
