package admission

import (
	"net/netip"
	"sync"
)

// addrShares counts what each source address holds under a per-address
// cap: connections, and separately requests in flight. With no cap
// (limit ≤ 0, the zero value) it counts nothing and takes no lock.
//
// An address's entry outlives its last slot: it is dropped by a sweep of
// the entries that hold nothing, run when a new address would grow the map
// past twice the addresses that hold a slot (plus sweepSlack). Why: a
// client's one request at a time made its entry come and go with every
// request, a map insert and a delete on top of the two lookups (~850
// instructions per small request, callgrind); a kept entry costs one
// lookup per take and per give. The sweep keeps the map within
// 2 × held + sweepSlack entries, and it runs at most once per held +
// sweepSlack new addresses, so its cost per address is constant.
type addrShares struct {
	limit int
	mu    sync.Mutex
	n     map[netip.Addr]*addrCount
	held  int // entries whose count is above zero
}

// addrCount is one address's count; by pointer, so a take or a give on a
// known address is one map lookup.
type addrCount struct{ n int }

// sweepSlack is how many entries that hold nothing the map may keep
// beyond the held ones' number before a sweep.
const sweepSlack = 64

// counts reports whether there is a cap to count against.
func (s *addrShares) counts() bool { return s.limit > 0 }

// take counts one more for ip unless it holds the cap already (false).
func (s *addrShares) take(ip netip.Addr) bool {
	if !s.counts() {
		return true
	}
	s.mu.Lock()
	c := s.n[ip]
	if c == nil {
		c = s.add(ip)
	}
	if c.n >= s.limit {
		s.mu.Unlock()
		return false
	}
	if c.n == 0 {
		s.held++
	}
	c.n++
	s.mu.Unlock()
	return true
}

// add enters ip, at zero, sweeping first when the map is due (s.mu held).
func (s *addrShares) add(ip netip.Addr) *addrCount {
	if s.n == nil {
		s.n = make(map[netip.Addr]*addrCount)
	}
	if len(s.n) >= 2*s.held+sweepSlack {
		for k, c := range s.n {
			if c.n == 0 {
				delete(s.n, k)
			}
		}
	}
	c := new(addrCount)
	s.n[ip] = c
	return c
}

// give counts one fewer for ip; an address left holding none keeps its
// entry until a sweep (add).
func (s *addrShares) give(ip netip.Addr) {
	if !s.counts() {
		return
	}
	s.mu.Lock()
	if c := s.n[ip]; c != nil && c.n > 0 {
		c.n--
		if c.n == 0 {
			s.held--
		}
	}
	s.mu.Unlock()
}
