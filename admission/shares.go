package admission

import (
	"net/netip"
	"sync"
)

// addrShares counts what each source address holds under a per-address
// cap: connections, and separately requests in flight. The zero value is
// ready.
type addrShares struct {
	mu sync.Mutex
	n  map[netip.Addr]int
}

// take counts one more for ip unless it holds limit already (false).
func (s *addrShares) take(ip netip.Addr, limit int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.n[ip]
	if n >= limit {
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
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.n[ip]; n <= 1 {
		delete(s.n, ip)
	} else {
		s.n[ip] = n - 1
	}
}
