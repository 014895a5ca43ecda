package kvexact

import (
	"math/bits"
	"sort"
	"time"
)

// RankState is the observable state of one (endpoint, DP rank) event
// stream, for the inventory API: what an operator needs to see why an
// endpoint does or does not steer requests.
type RankState struct {
	Endpoint  string
	Rank      int
	Blocks    int
	Connected bool
	Trusted   bool
	Reason    string // why untrusted ("" when trusted)
	HasSeq    bool
	LastSeq   uint64
}

// Ranks returns the state of every (endpoint, rank) the inventory knows,
// sorted by endpoint then rank. Trust per rank follows Trusted's rule.
func (inv *Inventory) Ranks() []RankState {
	inv.slotsMu.RLock()
	ss := make([]*slot, 0, len(inv.slots))
	for _, s := range inv.slots {
		ss = append(ss, s)
	}
	inv.slotsMu.RUnlock()
	now := inv.opts.Clock.Now()
	out := make([]RankState, 0, len(ss))
	for _, s := range ss {
		st := RankState{Endpoint: s.endpoint, Rank: s.rank, Blocks: int(inv.counts[bits.TrailingZeros64(s.bit)].Load())}
		s.applyMu.Lock()
		st.HasSeq, st.LastSeq = s.hasSeq, s.lastSeq
		s.applyMu.Unlock()
		s.stateMu.Lock()
		st.Connected = s.connected && (!inv.opts.Passive || now.Sub(s.heard) <= inv.opts.LiveWindow)
		st.Trusted, st.Reason = rankTrust(s.connected, s.rebuilt, now.Sub(s.since), inv.opts.Warmup, s.reason)
		s.stateMu.Unlock()
		if st.Trusted && inv.stale(s, now) {
			st.Trusted, st.Reason = false, ReasonStale
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Endpoint != out[j].Endpoint {
			return out[i].Endpoint < out[j].Endpoint
		}
		return out[i].Rank < out[j].Rank
	})
	return out
}

// rankTrust is Trusted's per-rank rule.
func rankTrust(connected, rebuilt bool, connectedFor, warmup time.Duration, reason string) (bool, string) {
	switch {
	case !connected && reason == ReasonHealthDown:
		return false, ReasonHealthDown
	case !connected:
		return false, ReasonDisconnected
	case rebuilt:
		return true, ""
	case connectedFor < warmup:
		if reason != "" {
			return false, reason
		}
		return false, ReasonWarmup
	}
	return true, ""
}
