package pick

import (
	"cmp"
	"sync/atomic"
)

// LeastLoaded returns the index of the candidate with the lowest load. Only
// exact ties rotate, through cursor, so equal endpoints share work evenly
// while a less loaded endpoint always wins. cands must not be empty.
func LeastLoaded(cands []Candidate, cursor *atomic.Uint64) int {
	return leastOf(cands, func(i int) int { return cands[i].Load }, 0, cursor)
}

// LeastLoadedKeyed is LeastLoaded whose exact ties go to key's rendezvous
// winner among the tied candidates (rotation through cursor when key is 0).
func LeastLoadedKeyed(cands []Candidate, key uint64, cursor *atomic.Uint64) int {
	return leastOf(cands, func(i int) int { return cands[i].Load }, key, cursor)
}

// leastOf is the one "least, then break exact ties" rule every load-like
// choice shares (in-flight counts, cost estimates): the index of the least
// value(i) over cands (not empty); exact ties go to key's rendezvous winner
// among them when key is not 0, else rotate through cursor (nil: the
// first), so equal endpoints share work while a lesser one always wins.
func leastOf[T cmp.Ordered](cands []Candidate, value func(i int) T, key uint64, cursor *atomic.Uint64) int {
	least, ties := value(0), 0
	for i := range cands {
		switch v := value(i); {
		case v < least:
			least, ties = v, 1
		case v == least:
			ties++
		}
	}
	if key != 0 {
		best, bestScore := -1, uint64(0)
		for i := range cands {
			if value(i) != least {
				continue
			}
			if s := hrwScore(key, cands[i].ID); best < 0 || s > bestScore {
				best, bestScore = i, s
			}
		}
		return best
	}
	n := 0
	if ties > 1 && cursor != nil {
		n = int(cursor.Add(1)-1) % ties
	}
	for i := range cands {
		if value(i) == least {
			if n == 0 {
				return i
			}
			n--
		}
	}
	return 0 // unreachable: ties counted above
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
