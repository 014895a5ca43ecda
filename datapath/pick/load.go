package pick

import "sync/atomic"

// LeastLoaded returns the index of the candidate with the lowest load. Only
// exact ties rotate, through cursor, so equal endpoints share work evenly
// while a less loaded endpoint always wins. cands must not be empty.
func LeastLoaded(cands []Candidate, cursor *atomic.Uint64) int {
	minLoad, ties := cands[0].Load, 0
	for i := range cands {
		c := &cands[i]
		switch {
		case c.Load < minLoad:
			minLoad, ties = c.Load, 1
		case c.Load == minLoad:
			ties++
		}
	}
	if ties == 1 {
		for i := range cands {
			c := &cands[i]
			if c.Load == minLoad {
				return i
			}
		}
	}
	n := int(cursor.Add(1)-1) % ties
	for i := range cands {
		c := &cands[i]
		if c.Load == minLoad {
			if n == 0 {
				return i
			}
			n--
		}
	}
	return 0 // unreachable: ties counted above
}

// LeastLoadedKeyed is LeastLoaded whose exact ties go to key's rendezvous
// winner among the tied candidates (rotation through cursor when key is 0).
func LeastLoadedKeyed(cands []Candidate, key uint64, cursor *atomic.Uint64) int {
	if key == 0 {
		return LeastLoaded(cands, cursor)
	}
	minLoad := MinLoad(cands)
	best, bestScore := -1, uint64(0)
	for i := range cands {
		c := &cands[i]
		if c.Load != minLoad {
			continue
		}
		if s := hrwScore(key, c.ID); best < 0 || s > bestScore {
			best, bestScore = i, s
		}
	}
	return best
}

// MinLoad is the least load among cands (0 when empty).
func MinLoad(cands []Candidate) int {
	m := 0
	for i := range cands {
		c := &cands[i]
		if i == 0 || c.Load < m {
			m = c.Load
		}
	}
	return m
}

// LoadGuardTrips is the one load guard of affinity: a choice yields when its
// endpoint's load exceeds the least loaded candidate's by more than
// balanceAbs. Only the chosen endpoint is compared, so one hot endpoint
// never switches affinity off for work owned by others. A negative
// balanceAbs disables the guard.
func LoadGuardTrips(load, minLoad, balanceAbs int) bool {
	return balanceAbs >= 0 && load-minLoad > balanceAbs
}
