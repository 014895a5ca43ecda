package chwbl

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/infergate/infergate/spec"
)

func members(n int, weights ...int) []Member {
	ms := make([]Member, n)
	for i := range ms {
		ms[i] = Member{ID: fmt.Sprintf("10.0.0.%d:8000", i+1), Weight: 1}
		if i < len(weights) {
			ms[i].Weight = weights[i]
		}
	}
	return ms
}

func mustRing(t testing.TB, ms []Member, o Options) *Ring {
	t.Helper()
	r, err := NewRing(ms, o)
	if err != nil {
		t.Fatalf("NewRing: %v", err)
	}
	return r
}

func zeroLoad(int) int     { return 0 }
func allEligible(int) bool { return true }

// keys are deterministic pseudo-random routing hashes.
func keys(n int) []uint64 {
	r := rand.New(rand.NewPCG(42, 42))
	ks := make([]uint64, n)
	for i := range ks {
		ks[i] = r.Uint64()
	}
	return ks
}

func TestDistribution(t *testing.T) {
	tests := []struct {
		name    string
		members []Member
		opts    Options
		want    []float64 // expected share per member
		tol     float64   // relative tolerance
	}{
		{"4 equal, 100 vnodes", members(4), DefaultOptions(), []float64{.25, .25, .25, .25}, .3},
		{"4 equal, 1000 vnodes", members(4), Options{Replication: 1000, MeanLoadFactor: 175}, []float64{.25, .25, .25, .25}, .1},
		{"weighted 1:2:4 (sel 10)", members(3, 1, 2, 4), Options{Replication: 400, MeanLoadFactor: 175, Weighted: true}, []float64{1. / 7, 2. / 7, 4. / 7}, .15},
		{"weight ignored unweighted (sel 8)", members(2, 1, 4), Options{Replication: 400, MeanLoadFactor: 175}, []float64{.5, .5}, .15},
		{"weight 0 gets nothing when weighted", members(3, 0, 1, 1), Options{Replication: 400, MeanLoadFactor: 175, Weighted: true}, []float64{0, .5, .5}, .15},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := mustRing(t, tc.members, tc.opts)
			ks := keys(50_000)
			got := make([]int, len(tc.members))
			for _, k := range ks {
				m, ok := r.Pick(k, zeroLoad, allEligible)
				if !ok {
					t.Fatal("no pick")
				}
				got[m]++
			}
			for i, w := range tc.want {
				share := float64(got[i]) / float64(len(ks))
				if (w == 0 && share != 0) || share < w*(1-tc.tol) || share > w*(1+tc.tol) {
					t.Errorf("member %d share %.3f, want %.3f ±%.0f%% (counts %v)", i, share, w, tc.tol*100, got)
				}
			}
		})
	}
}

// TestBoundRespected places requests that never finish, all on the same
// (hot) key or on random keys, and checks each pick was within the bound
// computed before it.
func TestBoundRespected(t *testing.T) {
	tests := []struct {
		name     string
		n        int
		factor   int
		hotKey   bool
		requests int
	}{
		{"hot prefix, 4 members, 175%", 4, 175, true, 200},
		{"hot prefix, 32 members, 125%", 32, 125, true, 500},
		{"random keys, 8 members, 100%", 8, 100, false, 500},
		{"hot prefix, 3 members, 300%", 3, 300, true, 100},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := mustRing(t, members(tc.n), Options{Replication: 100, MeanLoadFactor: tc.factor})
			load := make([]int, tc.n)
			ks := keys(tc.requests)
			total := 0
			for i := range tc.requests {
				k := ks[i]
				if tc.hotKey {
					k = ks[0]
				}
				bound := Bound(total, tc.n, tc.factor)
				m, ok := r.Pick(k, func(i int) int { return load[i] }, allEligible)
				if !ok || load[m]+1 > bound {
					t.Fatalf("request %d: picked %d with load %d, bound %d (loads %v)", i, m, load[m], bound, load)
				}
				load[m]++
				total++
			}
		})
	}
}

func TestPickDetailSkips(t *testing.T) {
	r := mustRing(t, members(4), DefaultOptions())
	k := keys(1)[0]
	home, _ := r.Pick(k, zeroLoad, allEligible)
	tests := []struct {
		name        string
		load        func(int) int
		wantSkipped int
		wantHome    bool
	}{
		{"idle fleet stays home", zeroLoad, 0, true},
		{"overloaded home skipped once", func(i int) int { return map[bool]int{true: 10}[i == home] }, 1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, skipped, ok := r.PickDetail(k, tc.load, allEligible)
			if !ok || skipped != tc.wantSkipped || (m == home) != tc.wantHome {
				t.Errorf("PickDetail = (%d, %d, %v), want skipped %d, home %v (home=%d)", m, skipped, ok, tc.wantSkipped, tc.wantHome, home)
			}
		})
	}
}

func TestMinBoundKeepsAffinity(t *testing.T) {
	tests := []struct {
		name       string
		minBound   int
		wantSpread bool
	}{
		{"textbook bound spreads a hot key at low load", 0, true},
		{"floor of 8 keeps 8 on the home member", 8, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := mustRing(t, members(32), Options{Replication: 100, MeanLoadFactor: 175, MinBound: tc.minBound})
			load := make([]int, 32)
			home, _ := r.Pick(7, zeroLoad, allEligible)
			spread := false
			for range 8 {
				m, _ := r.Pick(7, func(i int) int { return load[i] }, allEligible)
				spread = spread || m != home
				load[m]++
			}
			if spread != tc.wantSpread {
				t.Errorf("spread=%v, want %v (loads %v)", spread, tc.wantSpread, load)
			}
		})
	}
}

// TestStabilityOnRemoval: removing one member moves only the keys it held.
func TestStabilityOnRemoval(t *testing.T) {
	for _, removed := range []int{0, 3, 7} {
		t.Run(fmt.Sprint("remove ", removed), func(t *testing.T) {
			all := members(8)
			before := mustRing(t, all, DefaultOptions())
			rest := append(append([]Member(nil), all[:removed]...), all[removed+1:]...)
			after := mustRing(t, rest, DefaultOptions())
			moved, held := 0, 0
			for _, k := range keys(20_000) {
				b, _ := before.Pick(k, zeroLoad, allEligible)
				a, _ := after.Pick(k, zeroLoad, allEligible)
				if all[b].ID == all[removed].ID {
					held++
					continue
				}
				if rest[a].ID != all[b].ID {
					moved++
				}
			}
			if moved != 0 {
				t.Errorf("%d keys not on the removed member moved", moved)
			}
			if held == 0 {
				t.Error("removed member held no keys: test is vacuous")
			}
		})
	}
}

func TestPickEligibility(t *testing.T) {
	r := mustRing(t, members(4), DefaultOptions())
	k := keys(1)[0]
	home, _ := r.Pick(k, zeroLoad, allEligible)
	tests := []struct {
		name     string
		eligible func(int) bool
		load     func(int) int
		wantOK   bool
		check    func(m int) string
	}{
		{"home ineligible moves on", func(i int) bool { return i != home }, zeroLoad, true,
			func(m int) string { return map[bool]string{true: "picked the ineligible home"}[m == home] }},
		{"none eligible", func(int) bool { return false }, zeroLoad, false, nil},
		{"only one eligible, overloaded, still picked", func(i int) bool { return i == 2 }, func(int) int { return 1000 }, true,
			func(m int) string { return map[bool]string{true: "", false: "did not pick the only eligible"}[m == 2] }},
		{"home over bound moves on", allEligible, func(i int) int { return map[bool]int{true: 10}[i == home] }, true,
			func(m int) string { return map[bool]string{true: "stayed on the overloaded home"}[m == home] }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, ok := r.Pick(k, tc.load, tc.eligible)
			if ok != tc.wantOK {
				t.Fatalf("ok=%v, want %v", ok, tc.wantOK)
			}
			if ok && tc.check != nil {
				if msg := tc.check(m); msg != "" {
					t.Error(msg)
				}
			}
		})
	}
}

func TestKeyFallback(t *testing.T) {
	r := mustRing(t, members(3), DefaultOptions())
	tests := []struct {
		name    string
		prefix  string
		session string
		want    Source
	}{
		{"prefix wins", "You are helpful", "u1", SourcePrefix},
		{"session next", "", "u1", SourceSession},
		{"round robin last", "", "", SourceRoundRobin},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, src := r.Key([]byte(tc.prefix), 1, "model", tc.session); src != tc.want {
				t.Errorf("source %v, want %v", src, tc.want)
			}
		})
	}
	// Round-robin visits every member in turn.
	seen := map[int]int{}
	for range 6 {
		h, _ := r.Key(nil, 1, "", "")
		m, _ := r.Pick(h, zeroLoad, allEligible)
		seen[m]++
	}
	if len(seen) != 3 || seen[0] != 2 || seen[1] != 2 || seen[2] != 2 {
		t.Errorf("round robin picks %v, want each of 3 members twice", seen)
	}
}

func TestPrefixHashLevels(t *testing.T) {
	base := []byte(strings.Repeat("s", 300))
	tests := []struct {
		name   string
		a, b   []byte
		level  int
		saltA  string
		saltB  string
		wantEq bool
	}{
		{"differ after 256 bytes, level 1", append(base[:300:300], 'x'), append(base[:300:300], 'y'), 1, "m", "m", true},
		{"differ after 256 bytes, level 2", append(base[:300:300], 'x'), append(base[:300:300], 'y'), 2, "m", "m", false},
		{"differ at byte 0", []byte("a"), []byte("b"), 3, "m", "m", false},
		{"salt separates", base, base, 1, "m1", "m2", false},
		{"bad level means 1", append(base[:300:300], 'x'), append(base[:300:300], 'y'), 9, "m", "m", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ha, _ := PrefixHash(tc.a, tc.level, tc.saltA)
			hb, _ := PrefixHash(tc.b, tc.level, tc.saltB)
			if (ha == hb) != tc.wantEq {
				t.Errorf("equal=%v, want %v", ha == hb, tc.wantEq)
			}
		})
	}
	if _, ok := PrefixHash(nil, 1, "m"); ok {
		t.Error("empty key hashed")
	}
}

func TestOptions(t *testing.T) {
	tests := []struct {
		name    string
		o       Options
		wantErr string
	}{
		{"defaults", DefaultOptions(), ""},
		{"replication 0", Options{Replication: 0, MeanLoadFactor: 175}, "replication"},
		{"replication 1025", Options{Replication: 1025, MeanLoadFactor: 175}, "replication"},
		{"factor 99", Options{Replication: 1, MeanLoadFactor: 99}, "mean load factor"},
		{"factor 301", Options{Replication: 1, MeanLoadFactor: 301}, "mean load factor"},
		{"negative floor", Options{Replication: 1, MeanLoadFactor: 100, MinBound: -1}, "min bound"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.Validate()
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("Validate = %v, want %q", err, tc.wantErr)
			}
		})
	}
	got := FromSpec(&spec.CHWBL{Replication: 256, MeanLoadFactor: 125}, spec.SelWeightedCHWBL)
	if want := (Options{Replication: 256, MeanLoadFactor: 125, Weighted: true}); got != want {
		t.Errorf("FromSpec = %+v, want %+v", got, want)
	}
	if got := FromSpec(nil, spec.SelCHWBL); got != DefaultOptions() {
		t.Errorf("FromSpec(nil) = %+v, want defaults", got)
	}
}

func TestBound(t *testing.T) {
	tests := []struct{ total, n, factor, want int }{
		{0, 32, 175, 1},
		{1, 32, 175, 1},
		{1, 2, 175, 2},
		{6, 2, 175, 7},
		{7, 2, 175, 7},
		{99, 4, 100, 25},
		{0, 0, 175, 0},
	}
	for _, tc := range tests {
		if got := Bound(tc.total, tc.n, tc.factor); got != tc.want {
			t.Errorf("Bound(%d, %d, %d) = %d, want %d", tc.total, tc.n, tc.factor, got, tc.want)
		}
	}
}

// FuzzPick: never an ineligible member; ok iff some eligible member has
// vnodes; within the bound whenever any eligible member is.
func FuzzPick(f *testing.F) {
	f.Add(uint64(1), uint8(4), uint64(0xff), []byte{1, 2, 3, 4}, false, uint16(100), uint8(75))
	f.Add(uint64(99), uint8(40), uint64(0x5), []byte{0, 0, 9}, true, uint16(3), uint8(0))
	f.Fuzz(func(t *testing.T, hash uint64, n uint8, eligMask uint64, loads []byte, weighted bool, repl uint16, factor uint8) {
		o := Options{Replication: 1 + int(repl)%64, MeanLoadFactor: 100 + int(factor)%201, Weighted: weighted}
		weights := make([]int, len(loads)) // loads double as weights
		for i, l := range loads {
			weights[i] = int(l)
		}
		ms := members(1+int(n)%40, weights...)
		r := mustRing(t, ms, o)
		load := func(i int) int {
			if i < len(loads) {
				return int(loads[i])
			}
			return 0
		}
		elig := func(i int) bool { return eligMask&(1<<(i%64)) != 0 }
		m, ok := r.Pick(hash, load, elig)
		wantOK, total, cnt := false, 0, 0
		for i := range ms {
			if elig(i) {
				total += load(i)
				cnt++
				wantOK = wantOK || vnodes(ms[i].Weight, maxWeight(ms), o) > 0
			}
		}
		if ok != wantOK {
			t.Fatalf("ok=%v, want %v", ok, wantOK)
		}
		if !ok {
			return
		}
		if m < 0 || m >= len(ms) || !elig(m) {
			t.Fatalf("picked ineligible %d", m)
		}
		bound := Bound(total, cnt, o.MeanLoadFactor)
		if load(m)+1 > bound {
			for i := range ms {
				if elig(i) && vnodes(ms[i].Weight, maxWeight(ms), o) > 0 && load(i)+1 <= bound {
					t.Fatalf("picked %d over bound %d while %d was within", m, bound, i)
				}
			}
		}
	})
}

func maxWeight(ms []Member) int {
	w := 0
	for _, m := range ms {
		w = max(w, m.Weight)
	}
	return w
}
