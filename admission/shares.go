package admission

import (
	"net/netip"
	"sync"
)

// addrShares counts what each source address holds under a per-address
// cap: connections, and separately requests in flight. With no cap
// (limit ≤ 0, the zero value) it counts nothing and takes no lock.
type addrShares struct {
	limit int
	mu    sync.Mutex
	n     map[netip.Addr]int
}

// counts reports whether there is a cap to count against.
func (s *addrShares) counts() bool { return s.limit > 0 }

// take counts one more for ip unless it holds the cap already (false).
func (s *addrShares) take(ip netip.Addr) bool {
	if !s.counts() {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.n[ip]
	if n >= s.limit {
		return false
	}
	if s.n == nil {
		s.n = make(map[netip.Addr]int)
	}
	s.n[ip] = n + 1
	return true
}

// give counts one fewer for ip; an address that holds none is forgotten.
func (s *addrShares) give(ip netip.Addr) {
	if !s.counts() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.n[ip]; n <= 1 {
		delete(s.n, ip)
	} else {
		s.n[ip] = n - 1
	}
}
