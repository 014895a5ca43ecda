package datapath

import (
	"slices"
	"strings"

	"github.com/infergate/infergate/datapath/pd"
	"github.com/infergate/infergate/spec"
)

// CodeAdminPathDenied answers a client request for an engine admin path
// (pd.AdminPaths) on a rule that keeps them closed: 403, counted under this
// code in infergate_requests_total, never sent to an engine. 403 rather
// than 404: the path exists on the engine, the gateway's policy refuses it,
// and an operator reading the counter must not take it for a typo.
const CodeAdminPathDenied = "admin_path_denied"

// adminGate is one rule's closed admin paths, built once per compiled
// generation. nil denies nothing (the rule opened them).
type adminGate struct {
	exact    map[string]struct{}
	prefixes []string            // "prefix/*" entries without the "/*"
	named    map[string]struct{} // exact allowed_paths entries: opened
	// hint filters exact's keys by length and first letter (hintOf): a
	// path whose bit is clear is no key of exact. Why: every request's
	// path is asked about, and a lookup in a map of ~60 admin paths
	// (hash and probe, ~110–170 instructions) found nothing for any
	// inference path, whose "/v1/" no exact admin path of its length
	// shares.
	hint [64]uint32
}

// hintOf is a path's place in adminGate.hint: its length (mod 64) and its
// first byte after the slash (mod 32); ok is false for a path too short
// to have one, which is always looked up.
func hintOf(p string) (row int, bit uint32, ok bool) {
	if len(p) < 2 {
		return 0, 0, false
	}
	return len(p) & 63, 1 << (p[1] & 31), true
}

// addExact closes the exact path p.
func (g *adminGate) addExact(p string) {
	g.exact[p] = struct{}{}
	if row, bit, ok := hintOf(p); ok {
		g.hint[row] |= bit
	}
}

// mayHoldExact reports whether p may be a key of exact: false only when
// no key has p's length and first letter.
func (g *adminGate) mayHoldExact(p string) bool {
	row, bit, ok := hintOf(p)
	return !ok || g.hint[row]&bit != 0
}

// newAdminGate closes the admin paths of r's engine (every known engine's
// when the rule names none), except those r opens: all of them with
// allow_admin_paths, or one that allowed_paths names exactly (an operator
// who lists "/v1/load_lora_adapter" by name means it; a "prefix/*" entry
// never opens an admin path). The engine's sealed paths
// (pd.SealedAdminPaths) stay closed either way.
func newAdminGate(r *spec.Rule) *adminGate {
	sealed := pd.SealedAdminPaths(r.Admin.Engine)
	if r.Admin.Open {
		if len(sealed) == 0 {
			return nil
		}
		g := &adminGate{exact: make(map[string]struct{}, len(sealed))}
		for _, p := range sealed {
			g.addExact(p)
		}
		return g
	}
	named := make(map[string]struct{}, len(r.AllowedPaths))
	for _, a := range r.AllowedPaths {
		if !strings.HasSuffix(a, "/*") {
			named[a] = struct{}{}
		}
	}
	g := &adminGate{exact: map[string]struct{}{}, named: named}
	for _, p := range pd.AdminPaths(r.Admin.Engine) {
		if base, ok := strings.CutSuffix(p, "/*"); ok {
			g.prefixes = append(g.prefixes, base)
			continue
		}
		if _, open := named[p]; !open || slices.Contains(sealed, p) {
			g.addExact(p)
		}
	}
	return g
}

// denies reports whether path is a closed admin path. The path is compared
// as engines route it: repeated slashes collapsed and a trailing slash
// dropped (FastAPI redirects "/sleep/" to "/sleep"), case kept (engines
// route case-sensitively). A prefix entry also closes what it names below
// it, unless allowed_paths named that exact path.
func (g *adminGate) denies(path string) bool {
	if g == nil {
		return false
	}
	p := canonicalAdminPath(path)
	if g.mayHoldExact(p) {
		if _, ok := g.exact[p]; ok {
			return true
		}
	}
	for _, base := range g.prefixes {
		if strings.HasPrefix(p, base) && (len(p) == len(base) || p[len(base)] == '/') { // base or below it, no base+"/" built
			_, open := g.named[p]
			return !open
		}
	}
	return false
}

// canonicalAdminPath collapses "//" runs and drops a trailing "/" (the
// root stays "/"); it allocates only when the path needs it.
func canonicalAdminPath(p string) string {
	if !strings.Contains(p, "//") && (len(p) <= 1 || p[len(p)-1] != '/') {
		return p
	}
	var b strings.Builder
	b.Grow(len(p))
	for i := 0; i < len(p); i++ {
		if p[i] == '/' && i > 0 && p[i-1] == '/' {
			continue
		}
		b.WriteByte(p[i])
	}
	s := b.String()
	for len(s) > 1 && s[len(s)-1] == '/' {
		s = s[:len(s)-1]
	}
	return s
}
