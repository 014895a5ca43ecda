package main

import (
	"fmt"
	"math"
	"sort"
)

// longPrefill is the uncached prompt size from which a request's prefill
// holds its engine's steps long enough to delay the others there (1,000
// tokens: 0.25 s of the simulator's 250 µs per token).
const longPrefill = 1000

// tailNotes explains a run's slowest measured requests, those at or above
// its TTFT p99, from the per-request data: whether each was a hit, lost
// affinity or was a first sight (cached tokens against the computed ideal),
// and what its engine was doing when it arrived (requests in flight there,
// how many of them still before their first token with a long prefill). all
// is every request of the run, warm-up included, so the engine's state
// counts what the warm-up left running; engines are known when they name
// themselves (enginesim's header).
func tailNotes(all, measured []*result) []string {
	var answered []*result
	for _, r := range measured {
		if r.TTFT >= 0 {
			answered = append(answered, r)
		}
	}
	n := len(answered)
	if n == 0 {
		return nil
	}
	sort.Slice(answered, func(i, j int) bool { return answered[i].TTFT > answered[j].TTFT })
	k := n - int(math.Ceil(0.99*float64(n))) + 1 // the requests from the p99 up
	var out []string
	for _, r := range answered[:k] {
		kind := "hit"
		switch {
		case r.firstSight():
			kind = "first sight"
		case r.lostAffinity():
			kind = "lost affinity"
		}
		note := fmt.Sprintf("TTFT %.3f s at %.2f s, %s (%d of %d prompt tokens cached, ideal %d)", r.TTFT, r.Start, kind, r.Cached, r.Prompt, r.IdealHit)
		if r.Engine != "" {
			inFlight, prefilling := 0, 0
			for _, o := range all {
				if o == r || o.Engine != r.Engine || o.Start > r.Start || r.Start >= o.Start+o.E2E {
					continue
				}
				inFlight++
				if (o.TTFT < 0 || r.Start < o.Start+o.TTFT) && o.Prompt-o.Cached >= longPrefill {
					prefilling++
				}
			}
			note += fmt.Sprintf("; %s had %d in flight, %d of them before their first token with ≥ %d uncached tokens", r.Engine, inFlight, prefilling, longPrefill)
		}
		out = append(out, note)
	}
	return out
}
