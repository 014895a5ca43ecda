package ladder

import (
	"math/rand/v2"
	"sync/atomic"

	"github.com/infergate/infergate/spec"
)

// Per-leg policies (pd_prefill_policy, pd_decode_policy): how the ladder's
// last rung chooses a prefill, and how a decode is chosen, when no
// affinity (session pin, prefix, KV-exact) decided. SMG runs one policy
// instance per leg; so does this: each leg keeps its own rotation cursor.
// cache_aware is a prefill policy that turns on the prefix tier (the rule
// compiles it into pd_cache_aware_mode) and then chooses by load.

// Decode step reasons (infergate_ladder_decisions_total, tier "decode").
const (
	ReasonLeastLoaded = "least_loaded"
	ReasonRoundRobin  = "round_robin"
	ReasonPowerOfTwo  = "power_of_two"
)

// WithPolicies sets the rule's per-leg policies; "" keeps least load.
func (l *Ladder) WithPolicies(prefill, decode spec.Policy) *Ladder {
	l.prefillPolicy, l.decodePolicy = prefill, decode
	return l
}

// byPolicy chooses among cands (never empty) by policy with the leg's own
// cursor, and names how.
func (l *Ladder) byPolicy(f *Facts, cands []Candidate, policy spec.Policy, cursor *atomic.Uint64) (int, string) {
	switch policy {
	case spec.PolicyRoundRobin:
		return int((cursor.Add(1) - 1) % uint64(len(cands))), ReasonRoundRobin
	case spec.PolicyPowerOfTwo:
		return powerOfTwo(cands, rand.IntN), ReasonPowerOfTwo
	}
	return l.leastLoaded(f, cands, cursor), ReasonLeastLoaded
}

// powerOfTwo draws two distinct candidates (intn is rand.IntN, injectable
// for tests) and keeps the less loaded, the first drawn on a tie: load
// spreads almost as well as least-loaded without every chooser piling onto
// the same idle endpoint.
func powerOfTwo(cands []Candidate, intn func(int) int) int {
	n := len(cands)
	if n == 1 {
		return 0
	}
	i := intn(n)
	j := intn(n - 1)
	if j >= i {
		j++
	}
	if cands[j].Load < cands[i].Load {
		return j
	}
	return i
}
