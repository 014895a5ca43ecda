package datapath

import (
	"slices"

	"github.com/infergate/infergate/datapath/ladder"
	"github.com/infergate/infergate/spec"
)

// Issue 15: engines that register themselves may advertise facts a
// prefill/decode pair must share (rules/selector fills
// spec.Endpoint.PairFacts: KV block size, KV connector). The rule already
// refuses another engine than its own, so the engine always matches; these
// facts are compared per pair. Static endpoints advertise nothing and pair
// freely.

// CodeNoCompatiblePDPair is the 503 when usable prefills and decodes exist
// but no prefill/decode pair shares its advertised facts.
const CodeNoCompatiblePDPair = "no_compatible_pd_pair"

// pairDifference names the first fact (by name) that prefill p and decode
// d both advertise with different values; "" when they may pair.
func pairDifference(p, d *spec.Endpoint) string {
	if len(p.PairFacts) == 0 || len(d.PairFacts) == 0 {
		return ""
	}
	names := make([]string, 0, len(p.PairFacts))
	for k := range p.PairFacts {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if dv, ok := d.PairFacts[k]; ok && dv != p.PairFacts[k] {
			return k + ": prefill " + p.ID + " has " + p.PairFacts[k] + ", decode " + d.ID + " has " + dv
		}
	}
	return ""
}

// pairCheck reports whether the chosen pair may run; when it may not, it
// widens excl (the decode, or the prefill when no usable decode is
// compatible with it) and returns the difference.
func (c *compiled) pairCheck(pi, di int, decodes []ladder.Candidate, excl *uint64) string {
	eps := c.rule.Endpoints
	diff := pairDifference(&eps[pi], &eps[di])
	if diff == "" {
		return ""
	}
	for _, d := range decodes {
		if pairDifference(&eps[pi], &eps[d.Index]) == "" {
			*excl |= bit(di) // another decode fits this prefill
			return diff
		}
	}
	*excl |= bit(pi)
	return diff
}
