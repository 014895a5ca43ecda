package datapath

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"

	"github.com/infergate/infergate/epp"
	"github.com/infergate/infergate/spec"
)

// outsideSubsetLoops is outsideSubset as it was, every endpoint against
// every hint entry: the reference the one-pass match must agree with, and
// the "before" arm of BenchmarkOutsideSubset.
func (c *compiled) outsideSubsetLoops(subset []string) uint64 {
	if subset == nil {
		return 0
	}
	var m uint64
	for i := range c.rule.Endpoints {
		if !slices.Contains(subset, c.eppAddr(i)) {
			m |= bit(i)
		}
	}
	return m
}

// subsetPool is a compiled rule over the given endpoint addresses, built
// as far as subset matching needs.
func subsetPool(addrs ...string) *compiled {
	eps := make([]spec.Endpoint, len(addrs))
	for i, a := range addrs {
		eps[i] = spec.Endpoint{ID: a}
	}
	c := &compiled{rule: &spec.Rule{Endpoints: eps}}
	c.addrBits = c.eppAddrBits()
	return c
}

// unknownAddrs are n addresses outside every test pool.
func unknownAddrs(n int) []string { return sameLengthAddrs(100, n) }

// sameLengthAddrs are n distinct addresses from 10.<net>.100.100:8000 on,
// every octet three digits (net from 100 up): all as long as each other,
// so comparing two costs a byte comparison, not just a length check.
func sameLengthAddrs(net, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("10.%d.%d.%d:8000", net+i/22500, 100+i/150%150, 100+i%150)
	}
	return out
}

// TestOutsideSubset: the exclusion mask of a subset hint, long or short,
// with repeats and addresses the pool does not have, equals the nested
// loops' mask.
func TestOutsideSubset(t *testing.T) {
	a, b, c, d := "10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000", "10.0.0.4:8000"
	pool := subsetPool(a, b, c, d)
	// b listed twice: one engine, two entries, both pickable when named.
	twice := subsetPool(a, b, c, b)
	wide := make([]string, 70) // past 64 endpoints nothing can be masked
	for i := range wide {
		wide[i] = fmt.Sprintf("10.1.0.%d:8000", i+1)
	}
	widePool := subsetPool(wide...)
	long := append(unknownAddrs(100_000), c, a)
	cases := []struct {
		name   string
		c      *compiled
		subset []string
		want   uint64
	}{
		{"no hint", pool, nil, 0},
		{"empty list excludes all", pool, []string{}, 0b1111},
		{"one", pool, []string{b}, 0b1101},
		{"short", pool, []string{d, a}, 0b0110},
		{"repeats", pool, []string{a, a, b, a}, 0b1100},
		{"unknown entries ignored", pool, []string{"10.9.9.9:1", c, "x"}, 0b1011},
		{"only unknown", pool, []string{"10.9.9.9:1"}, 0b1111},
		{"whole pool", pool, []string{d, c, b, a}, 0},
		{"pool address listed twice", twice, []string{b}, 0b0101},
		{"long", pool, long, 0b1010},
		{"long, repeats", pool, append(long, a, c, a), 0b1010},
		{"long, only unknown", pool, unknownAddrs(100_000), 0b1111},
		{"past 64 endpoints", widePool, []string{wide[0], wide[69]}, ^uint64(0) &^ 1},
		{"empty pool", subsetPool(), []string{a}, 0},
	}
	for _, tc := range cases {
		got, ref := tc.c.outsideSubset(tc.subset), tc.c.outsideSubsetLoops(tc.subset)
		if got != tc.want || got != ref {
			t.Errorf("%s: mask %b, want %b (nested loops: %b)", tc.name, got, tc.want, ref)
		}
	}
}

// TestEPPLongSubset: a pick with a 100,000-address hint stays inside it,
// and one naming nothing in the pool is the same 503 as a short one.
func TestEPPLongSubset(t *testing.T) {
	rt, _ := newTestRuntime(t, testOptions())
	r := chwblRule(t, rt, 4)
	p := rt.EPPPicker(r.Name)
	all := addrs(r, spec.RoleAny)
	hint := append(unknownAddrs(100_000), all[2], all[1], all[2])
	for k := range 4 {
		res := pickServe(t, p, chatReq("", fmt.Sprintf("prompt %d", k), hint), http.StatusOK)
		for _, e := range res.Endpoints {
			if e != all[1] && e != all[2] {
				t.Fatalf("picked %v outside the hint's %s and %s", res.Endpoints, all[1], all[2])
			}
		}
	}
	_, err := p.Pick(context.Background(), chatReq("", "x", unknownAddrs(100_000)))
	var ref *epp.Refusal
	if !errors.As(err, &ref) || ref.Status != http.StatusServiceUnavailable || ref.Reason != reasonNoEligible {
		t.Errorf("hint outside the pool: got %v, want 503 %s", err, reasonNoEligible)
	}
	assertSettled(t, rt.rules[r.Key].cur.Load())
}

// BenchmarkOutsideSubset: the exclusion mask of a 16-endpoint pool for a
// short hint and a 100,000-address one (the pool's addresses last, every
// entry as long as theirs: the loops' worst case), by
// the nested loops ("loops", before) and by one pass over the hint
// ("index", after). Run with -count so the two arms alternate.
func BenchmarkOutsideSubset(b *testing.B) {
	addrs := sameLengthAddrs(200, 16)
	c := subsetPool(addrs...)
	hints := []struct {
		name string
		h    []string
	}{
		{"hint=4", []string{addrs[3], addrs[9], addrs[1], addrs[15]}},
		{"hint=100000", append(unknownAddrs(100_000-len(addrs)), addrs...)},
	}
	for _, h := range hints {
		for _, arm := range []struct {
			name string
			f    func([]string) uint64
		}{{"loops", c.outsideSubsetLoops}, {"index", c.outsideSubset}} {
			b.Run(h.name+"/"+arm.name, func(b *testing.B) {
				b.ReportAllocs()
				var m uint64
				for b.Loop() {
					m |= arm.f(h.h)
				}
				if m != 0 && h.name == "hint=100000" {
					b.Fatalf("mask %b: the whole pool is in the hint", m)
				}
			})
		}
	}
}

// TestIndexOfAddr: the served report's endpoint is found through the
// address index — the first endpoint listed with an address, one past the
// 64th by its address alone, -1 for an address the pool lacks.
func TestIndexOfAddr(t *testing.T) {
	big := sameLengthAddrs(200, 70)
	big[3] = big[1] // one engine listed twice
	c := subsetPool(big...)
	cases := []struct {
		name string
		addr string
		want int
	}{
		{"the first endpoint", big[0], 0},
		{"listed twice: the first of the two", big[1], 1},
		{"the 64th", big[63], 63},
		{"past the 64th", big[69], 69},
		{"not in the pool", "10.9.9.9:1", -1},
		{"empty", "", -1},
	}
	for _, tc := range cases {
		if got := c.indexOfAddr(tc.addr); got != tc.want {
			t.Errorf("%s: indexOfAddr(%q) = %d, want %d", tc.name, tc.addr, got, tc.want)
		}
	}
}
