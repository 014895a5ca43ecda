package datapath

import (
	"cmp"
	"math/bits"
	"net"
	"slices"
	"strings"

	"github.com/infergate/infergate/internal/swar"
	"github.com/infergate/infergate/spec"
)

// Path match modes (wire: path_match_mode; "" and "disabled" mean off).
const (
	pathMatchPrefix = "prefix"
	pathMatchExact  = "exact"
)

// routeTable is the immutable set of rules served on one listener, most
// specific first. A new table is built and swapped on every install/remove.
type routeTable struct {
	rules []*ruleState
	// needsModel is true when some rule keys on model_name, so a request
	// without X-Model must have its body's "model" read to be routed.
	needsModel bool
	// hostKeyed is true when some rule pins a host: only then does a
	// request's Host need cutting from its port to be routed (route).
	hostKeyed bool
}

// specificity orders rules: a model pin beats a host pin beats an exact path
// beats a longer prefix beats a shorter one beats no path.
func specificity(k spec.Key) (model, host, exact, prefixLen int) {
	if k.ModelName != "" {
		model = 1
	}
	if k.Host != "" {
		host = 1
	}
	switch k.PathMatchMode {
	case pathMatchExact:
		exact = 1
		prefixLen = len(k.PathPrefix)
	case pathMatchPrefix:
		prefixLen = len(k.PathPrefix)
	}
	return
}

func newRouteTable(rules []*ruleState) *routeTable {
	rs := slices.Clone(rules)
	slices.SortStableFunc(rs, func(a, b *ruleState) int {
		am, ah, ae, ap := specificity(a.key)
		bm, bh, be, bp := specificity(b.key)
		if c := cmp.Compare(bm, am); c != 0 {
			return c
		}
		if c := cmp.Compare(bh, ah); c != 0 {
			return c
		}
		if c := cmp.Compare(be, ae); c != 0 {
			return c
		}
		if c := cmp.Compare(bp, ap); c != 0 {
			return c
		}
		return cmp.Compare(a.key.Block, b.key.Block)
	})
	t := &routeTable{rules: rs}
	for _, r := range rs {
		if r.key.ModelName != "" {
			t.needsModel = true
		}
		if r.key.Host != "" {
			t.hostKeyed = true
		}
	}
	return t
}

// matches reports whether a request for host/path/model falls under key k.
// host has no port; model is "" when the request names none.
func matches(k spec.Key, host, path, model string) bool {
	if k.Host != "" && !strings.EqualFold(k.Host, host) {
		return false
	}
	switch k.PathMatchMode {
	case pathMatchExact:
		if path != k.PathPrefix {
			return false
		}
	case pathMatchPrefix:
		if !strings.HasPrefix(path, k.PathPrefix) {
			return false
		}
	}
	return k.ModelName == "" || k.ModelName == model
}

// route returns the most specific rule for a request for host (the Host
// field as sent, port and all), path and model, or nil. The host is cut
// from its port only when some rule pins one: matches reads it for those
// alone (hostOnly cost ~100 instructions a request, callgrind).
func (t *routeTable) route(host, path, model string) *ruleState {
	if t.hostKeyed {
		host = hostOnly(host)
	}
	return t.match(host, path, model)
}

// match returns the most specific rule for the request, or nil.
func (t *routeTable) match(host, path, model string) *ruleState {
	for _, r := range t.rules {
		if matches(r.key, host, path, model) {
			return r
		}
	}
	return nil
}

// hostOnly strips an optional port from a Host header value.
func hostOnly(h string) string {
	if colon, bracket := hostMarks(h); !bracket {
		// No brackets, the usual "name:port" or address: what
		// net.SplitHostPort and the trims below make of it, without their
		// calls and the trims' cutset built per request (0.06 µs of ~4 in
		// the handler). One colon splits; none or several (a bare IPv6
		// address) leave h whole.
		if colon < 0 {
			return h
		}
		return h[:colon]
	}
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.HasSuffix(h, "]") {
		if host, _, err := net.SplitHostPort(h); err == nil {
			return strings.Trim(host, "[]")
		}
	}
	return strings.Trim(h, "[]")
}

// hostMarks walks h a word at a time for its colon, when it holds exactly
// one (else -1), and whether it may hold a bracket: 'Y' and '_' count as
// brackets too (one test of a word flags all four, which differ in bits 1
// and 2 only), which only sends h the general way. Why: the searches for
// '[', ']', ':' and a second ':' were four walks of h.
func hostMarks(h string) (colon int, bracket bool) {
	const (
		bracketBits = 0x06 // '[' ^ ']': cleared, '[', ']', 'Y' and '_' become 'Y'
		bracketWord = bracketBits * 0x0101010101010101
	)
	colon = -1
	several := false
	for i := 0; i < len(h); i += 8 {
		var x uint64 // h[i:i+8], zeros past h's end
		switch {
		case i+8 <= len(h):
			x = swar.Word8(h[i : i+8])
		case len(h) >= 8:
			x = swar.Word8(h[len(h)-8:]) >> (8 * (i + 8 - len(h))) // the bytes before i shifted out
		default:
			for k := len(h) - 1; k >= i; k-- {
				x = x<<8 | uint64(h[k])
			}
		}
		if c := swar.Eq(x, ':'); c != 0 {
			several = several || colon >= 0 || c&(c-1) != 0
			colon = i + bits.TrailingZeros64(c)/8
		}
		bracket = bracket || swar.ByteIs(x&^bracketWord, '['&^bracketBits)
	}
	if several {
		return -1, bracket
	}
	return colon, bracket
}
