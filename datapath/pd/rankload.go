package pd

import (
	"math/rand/v2"
	"sync/atomic"
)

// A prefill with data parallelism runs one engine per DP rank behind one
// API server. When the gateway pins a leg to a rank (Mooncake and MoRI-IO
// prefills, whose decode must name the rank) and the KV-exact tier has no
// preference, it sends the leg to the rank with the fewest of the
// gateway's own prefill legs in flight: the gateway is the one placing
// these legs, and the engine signals it scrapes (enginestats) are one
// value per endpoint, not per rank (vLLM's /metrics does label its load
// per engine, which a per-rank scrape could use later). Ties are broken
// at random, so an idle fleet still spreads as vLLM's own balancer would.

// maxCountedRank bounds the ranks RankLoad counts: a rank at or above it
// reads as idle (vLLM's DP sizes are far smaller).
const maxCountedRank = 256

// RankLoad counts one endpoint's prefill legs in flight per DP rank. The
// zero value is ready; the counters are allocated on first use, so an
// endpoint without ranks costs one pointer. Safe for concurrent use.
type RankLoad struct {
	c atomic.Pointer[[maxCountedRank]atomic.Int64]
}

// RankLoadSource is an EngineIDSource that also keeps each endpoint's
// per-rank in-flight counts (the datapath's does, on the endpoint, so
// they survive rule updates; Request.EngineIDs is asserted to it).
type RankLoadSource interface {
	// RankLoad is the counter of the endpoint with ID id (nil: none kept).
	RankLoad(id string) *RankLoad
}

// counts is the counter array, allocated once.
func (l *RankLoad) counts() *[maxCountedRank]atomic.Int64 {
	if c := l.c.Load(); c != nil {
		return c
	}
	l.c.CompareAndSwap(nil, new([maxCountedRank]atomic.Int64))
	return l.c.Load()
}

// InFlight is rank's prefill legs in flight (0 for an uncounted rank).
func (l *RankLoad) InFlight(rank int) int64 {
	if l == nil || rank < 0 || rank >= maxCountedRank {
		return 0
	}
	c := l.c.Load()
	if c == nil {
		return 0
	}
	return c[rank].Load()
}

// Hold counts one leg on rank until the returned release runs (its second
// and later calls do nothing): the dialects hold a pinned rank while its
// prefill leg runs.
func (l *RankLoad) Hold(rank int) (release func()) {
	if l == nil || rank < 0 || rank >= maxCountedRank {
		return func() {}
	}
	n := &l.counts()[rank]
	n.Add(1)
	var done atomic.Bool
	return func() {
		if done.CompareAndSwap(false, true) {
			n.Add(-1)
		}
	}
}

// leastLoaded is the index in 0..n-1 whose rank (rankAt) has the fewest
// legs in flight, ties broken uniformly at random; n > 0.
func (l *RankLoad) leastLoaded(n int, rankAt func(i int) int) int {
	best, ties := 0, 0
	var min int64
	for i := range n {
		v := l.InFlight(rankAt(i))
		switch {
		case i == 0 || v < min:
			best, min, ties = i, v, 1
		case v == min:
			// Reservoir choice: each tied index ends up chosen with
			// probability 1/ties.
			if ties++; rand.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return best
}

// rankLoad is ep's per-rank counter from the request's source (nil: none).
func (q *seq) rankLoad(id string) *RankLoad {
	if src, ok := q.req.EngineIDs.(RankLoadSource); ok {
		return src.RankLoad(id)
	}
	return nil
}
