package datapath

import (
	"maps"
	"slices"
	"strings"

	"github.com/infergate/infergate/datapath/ladder"
	"github.com/infergate/infergate/spec"
)

// P/D pairing. A prefill can hand its KV only to a decode that speaks the
// same transfer. Endpoints carry what they speak as spec.Endpoint.PairFacts:
// registered engines advertise them (rules/selector: block size, KV
// connector) and static endpoints declare them (rules/pairing.go:
// kv_connector, kv_block_size, kv_cache_dtype, pairing_protocol). The rule
// already refuses another engine than its own, so the engine always
// matches; the facts, the rule's pairing mode and the transfer addresses
// are compared per pair, here and only here.

// CodeNoCompatiblePDPair is the 503 when usable prefills and decodes exist
// but no prefill/decode pair shares its advertised facts.
const CodeNoCompatiblePDPair = "no_compatible_pd_pair"

// pairDifference names what keeps prefill p and decode d from pairing; ""
// when they may pair. The rule (strict: the rule's pd_pairing_mode):
//   - every fact both legs state must have the same value (all differing
//     facts are named, with both legs' values);
//   - strict: each leg must state a pairing_protocol or a kv_connector;
//   - the transfer addresses must both be loopback or both not: a decode
//     told to pull from a loopback prefill would reach itself (Infera's
//     preflight refuses the same mix).
func pairDifference(p, d *spec.Endpoint, strict bool) string {
	var diffs []string
	if strict {
		for _, leg := range [2]struct {
			role string
			ep   *spec.Endpoint
		}{{"prefill", p}, {"decode", d}} {
			if leg.ep.PairFacts[spec.FactPairingProtocol] == "" && leg.ep.PairFacts[spec.FactKVConnector] == "" {
				diffs = append(diffs, "pd_pairing_mode strict: "+leg.role+" "+leg.ep.ID+" declares no pairing_protocol or kv_connector")
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(p.PairFacts)) {
		if dv, ok := d.PairFacts[k]; ok && dv != p.PairFacts[k] {
			diffs = append(diffs, k+": prefill "+p.ID+" has "+p.PairFacts[k]+", decode "+d.ID+" has "+dv)
		}
	}
	if pl, dl := p.Addr.Addr().IsLoopback(), d.Addr.Addr().IsLoopback(); pl != dl {
		diffs = append(diffs, "transfer address: prefill "+p.ID+" is "+loopbackWord(pl)+", decode "+d.ID+" is "+loopbackWord(dl)+
			" (a loopback address names a different host to its peer)")
	}
	return strings.Join(diffs, "; ")
}

func loopbackWord(loopback bool) string {
	if loopback {
		return "loopback"
	}
	return "not loopback"
}

// pairingKey is an endpoint's pairing facts as shown in /status.
func pairingKey(ep *spec.Endpoint) string { return spec.PairingKey(ep.PairFacts) }

// pairStrict reports the rule's pd_pairing_mode.
func (c *compiled) pairStrict() bool { return c.rule.PD != nil && c.rule.PD.PairingStrict }

// pairCheck reports whether the chosen pair may run; when it may not, it
// widens excl (the decode, or the prefill when no usable decode is
// compatible with it) and returns the difference. A prefill is therefore
// only ever sent a request with a decode it can hand its KV to.
func (c *compiled) pairCheck(pi, di int, decodes []ladder.Candidate, excl *uint64) string {
	eps, strict := c.rule.Endpoints, c.pairStrict()
	diff := pairDifference(&eps[pi], &eps[di], strict)
	if diff == "" {
		return ""
	}
	for _, d := range decodes {
		if pairDifference(&eps[pi], &eps[d.Index], strict) == "" {
			*excl |= bit(di) // another decode fits this prefill
			return diff
		}
	}
	*excl |= bit(pi)
	return diff
}

// usablePair reports whether some usable prefill may pair with some usable
// decode, and otherwise the difference of the first pair tried (for the
// rule's readiness reason).
func (c *compiled) usablePair(prefills, decodes []ladder.Candidate) (ok bool, diff string) {
	eps, strict := c.rule.Endpoints, c.pairStrict()
	for _, p := range prefills {
		for _, d := range decodes {
			dd := pairDifference(&eps[p.Index], &eps[d.Index], strict)
			if dd == "" {
				return true, ""
			}
			if diff == "" {
				diff = dd
			}
		}
	}
	return false, diff
}

// warnNoPair logs a no_compatible_pd_pair difference at warn once per
// change: every request of an unpairable rule fails the same way, and one
// line per request would bury the cause.
func (rt *Runtime) warnNoPair(c *compiled, diff string) {
	if last := c.pairWarned.Swap(&diff); last != nil && *last == diff {
		return
	}
	rt.log.WithField("rule", c.label).WithField("difference", diff).
		Warn("P/D rule has usable prefills and decodes but no compatible pair (503 no_compatible_pd_pair)")
}

// pairable keeps the failover alternates (of role) that may pair with
// endpoint other, the pair's fixed leg: a prefill retried elsewhere must
// still hand its KV to the chosen decode, and a decode taking over must
// speak the prefill's transfer.
func (c *compiled) pairable(alts []spec.Endpoint, other int, role spec.Role) []spec.Endpoint {
	strict, o := c.pairStrict(), &c.rule.Endpoints[other]
	return slices.DeleteFunc(alts, func(e spec.Endpoint) bool {
		if role == spec.RolePrefill {
			return pairDifference(&e, o, strict) != ""
		}
		return pairDifference(o, &e, strict) != ""
	})
}
