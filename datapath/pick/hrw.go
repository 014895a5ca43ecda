package pick

import "github.com/cespare/xxhash/v2"

// Replica-consistent choices. Several gateway replicas share no per-request
// state, so wherever a picker would take "any of these equal candidates" it
// can take the rendezvous (highest random weight) winner of a key the
// request carries — its session key, else the head of its prompt — over the
// candidates' IDs. Every replica computes the same winner with no round
// trip, a candidate leaving moves only the keys it won, and a load guard
// (each replica's own in-flight counts) still overrides it.

// PrefixSeedBytes is how much of the prompt key seeds the choice for
// requests without a session key: requests sharing at least this long a
// head (a system prompt) go to the same endpoint on every replica.
const PrefixSeedBytes = 512

// DefaultSessionGuard is how far above the least loaded candidate (in
// in-flight requests, as this replica sees them) a rendezvous winner may be
// before the request goes through the other pickers instead.
const DefaultSessionGuard = 3

// Key is the request's rendezvous key: its session key, else the first
// PrefixSeedBytes of its prompt key, else 0 (no key: ties rotate). It is
// computed once per request and cached in f.
func (f *Facts) Key() uint64 {
	if f.keyDone {
		return f.key
	}
	switch {
	case f.SessionKey != "":
		f.key = nonZero(xxhash.Sum64String(f.SessionKey))
	case len(f.PromptKey) > 0:
		f.key = nonZero(xxhash.Sum64(f.PromptKey[:min(len(f.PromptKey), PrefixSeedBytes)]))
	}
	f.keyDone = true
	return f.key
}

func nonZero(h uint64) uint64 {
	if h == 0 {
		return 1
	}
	return h
}

// hrwScore is the rendezvous weight of endpoint id for key: a 64-bit mix
// (splitmix64 finaliser) of key and the id's hash, so every replica and
// every build agree.
func hrwScore(key uint64, id string) uint64 {
	x := key ^ xxhash.Sum64String(id)
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Rendezvous returns the index of key's winner among cands (not empty).
func Rendezvous(cands []Candidate, key uint64) int {
	best, bestScore := 0, uint64(0)
	for i := range cands {
		c := &cands[i]
		if s := hrwScore(key, c.ID); i == 0 || s > bestScore {
			best, bestScore = i, s
		}
	}
	return best
}
