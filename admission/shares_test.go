package admission

import (
	"net/netip"
	"testing"
)

// holding is how many slots ip holds.
func (s *addrShares) holding(ip netip.Addr) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.n[ip]; c != nil {
		return c.n
	}
	return 0
}

// TestAddrSharesSweep: entries that hold nothing stay until a new
// address would grow the map past 2 × held + sweepSlack; the sweep then
// drops only those, and the counts of held addresses are untouched.
func TestAddrSharesSweep(t *testing.T) {
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}) }
	for _, tc := range []struct {
		name    string
		held    int // addresses that keep one slot
		churned int // addresses that take and give one slot, after the held ones
		maxLen  int // bound on the map's size throughout
	}{
		{"churn only", 0, 1000, sweepSlack},
		{"few held", 3, 1000, 2*3 + sweepSlack},
		{"many held", 200, 2000, 2*200 + sweepSlack},
		{"below the slack", 0, sweepSlack - 1, sweepSlack - 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := addrShares{limit: 2}
			for i := range tc.held {
				if !s.take(addr(i)) {
					t.Fatalf("take %d refused", i)
				}
			}
			for i := tc.held; i < tc.held+tc.churned; i++ {
				if !s.take(addr(i)) {
					t.Fatalf("take %d refused", i)
				}
				s.give(addr(i))
				if len(s.n) > tc.maxLen {
					t.Fatalf("after %d: %d entries, want ≤ %d", i, len(s.n), tc.maxLen)
				}
			}
			if s.held != tc.held {
				t.Fatalf("held %d, want %d", s.held, tc.held)
			}
			for i := range tc.held {
				if n := s.holding(addr(i)); n != 1 {
					t.Fatalf("%v holds %d after the sweeps, want 1", addr(i), n)
				}
			}
		})
	}
}

// TestAddrSharesCounts: the cap per address, a kept entry counted from
// zero again, and a give without a take ignored.
func TestAddrSharesCounts(t *testing.T) {
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	type op struct {
		take bool
		ip   netip.Addr
		want bool // take's result
	}
	for _, tc := range []struct {
		name string
		ops  []op
		held int
		a, b int // slots held at the end
	}{
		{"cap", []op{{true, a, true}, {true, a, true}, {true, a, false}, {true, b, true}}, 2, 2, 1},
		{"taken again after giving", []op{{true, a, true}, {false, a, false}, {true, a, true}, {true, a, true}, {true, a, false}}, 1, 2, 0},
		{"give without take", []op{{false, b, false}, {true, a, true}, {false, b, false}}, 1, 1, 0},
		{"give twice", []op{{true, a, true}, {false, a, false}, {false, a, false}, {true, a, true}}, 1, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := addrShares{limit: 2}
			for i, o := range tc.ops {
				if !o.take {
					s.give(o.ip)
					continue
				}
				if got := s.take(o.ip); got != o.want {
					t.Fatalf("op %d: take(%v) %v, want %v", i, o.ip, got, o.want)
				}
			}
			if s.held != tc.held || s.holding(a) != tc.a || s.holding(b) != tc.b {
				t.Fatalf("held %d, a %d, b %d; want %d, %d, %d", s.held, s.holding(a), s.holding(b), tc.held, tc.a, tc.b)
			}
		})
	}
}
