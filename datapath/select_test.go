package datapath

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/infergate/infergate/datapath/pick"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/spec"
	"github.com/infergate/infergate/test/bench/proccpu"
	"github.com/prometheus/client_golang/prometheus"
)

// testCompiled builds a generation over n endpoints 10.0.0.i:8000 with the
// given weights (all active).
func testCompiled(tb testing.TB, sel spec.Selector, weights []int, backup []bool) *compiled {
	tb.Helper()
	var eps []spec.Endpoint
	for i, w := range weights {
		ep := spec.Endpoint{Weight: w}
		ep.Addr = mustAddrPort(fmt.Sprintf("10.0.%d.%d:8000", i/250, i%250+1))
		ep.ID = ep.Addr.String()
		if backup != nil {
			ep.Backup = backup[i]
		}
		eps = append(eps, ep)
	}
	r := newRule("127.0.0.1", 1, sel, eps...)
	r.Session = spec.SessionKey{Source: spec.SessionFromHeader, Name: "x-user"}
	o := DefaultOptions()
	c, _ := newCompiled(r, nil, &o, metrics.NewDatapath(prometheus.NewRegistry()))
	return c
}

func counts(c *compiled, n int, f func(k int) *pick.PoolFacts) []int {
	got := make([]int, len(c.eps))
	for k := range n {
		if i := c.pick(f(k), 0); i >= 0 {
			got[i]++
		}
	}
	return got
}

func TestSelectorDistribution(t *testing.T) {
	same := func(int) *pick.PoolFacts { return &pick.PoolFacts{ClientIP: "127.0.0.9", Session: "alice"} }
	varied := func(k int) *pick.PoolFacts {
		return &pick.PoolFacts{ClientIP: "127.0.1." + strconv.Itoa(k%200), Session: "u" + strconv.Itoa(k)}
	}
	tests := []struct {
		name    string
		sel     spec.Selector
		weights []int
		backup  []bool
		down    []int // endpoints marked down
		facts   func(int) *pick.PoolFacts
		n       int
		want    []int // exact counts; nil = check wantSet only
		wantSet func([]int) error
	}{
		{name: "rr even", sel: spec.SelRoundRobin, weights: []int{1, 1, 1}, facts: varied, n: 300, want: []int{100, 100, 100}},
		{name: "rr skips weight 0", sel: spec.SelRoundRobin, weights: []int{1, 0, 1}, facts: varied, n: 300, want: []int{150, 0, 150}},
		{name: "rr skips down", sel: spec.SelRoundRobin, weights: []int{1, 1, 1}, down: []int{2}, facts: varied, n: 300, want: []int{150, 150, 0}},
		{name: "wrr 5:1:1", sel: spec.SelWeightedRR, weights: []int{5, 1, 1}, facts: varied, n: 700, want: []int{500, 100, 100}},
		{name: "wrr weight 0 drains", sel: spec.SelWeightedRR, weights: []int{3, 0, 1}, facts: varied, n: 400, want: []int{300, 0, 100}},
		{name: "hash same client sticks", sel: spec.SelSourceHash, weights: []int{1, 1, 1, 1}, facts: same, n: 100,
			wantSet: oneEndpointGot(100)},
		{name: "hash spreads clients", sel: spec.SelSourceHash, weights: []int{1, 1, 1, 1}, facts: varied, n: 400,
			wantSet: allEndpointsGot(1)},
		{name: "persist same key sticks", sel: spec.SelPersist, weights: []int{1, 1, 1}, facts: same, n: 90,
			wantSet: oneEndpointGot(90)},
		{name: "persist no key is rr", sel: spec.SelPersist, weights: []int{1, 1, 1},
			facts: func(int) *pick.PoolFacts { return &pick.PoolFacts{} }, n: 90, want: []int{30, 30, 30}},
		{name: "lc idle pool rotates", sel: spec.SelLeastConn, weights: []int{1, 1, 1}, facts: varied, n: 90, want: []int{30, 30, 30}},
		{name: "backup idle while primary up", sel: spec.SelRoundRobin, weights: []int{1, 1}, backup: []bool{false, true}, facts: varied, n: 50, want: []int{50, 0}},
		{name: "backup serves when primary down", sel: spec.SelRoundRobin, weights: []int{1, 1}, backup: []bool{false, true}, down: []int{0}, facts: varied, n: 50, want: []int{0, 50}},
		{name: "all down picks none", sel: spec.SelLeastConn, weights: []int{1, 1}, down: []int{0, 1}, facts: varied, n: 10, want: []int{0, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := testCompiled(t, tc.sel, tc.weights, tc.backup)
			for _, i := range tc.down {
				c.eps[i].health.Store(healthDown)
			}
			got := counts(c, tc.n, tc.facts)
			if tc.want != nil {
				if fmt.Sprint(got) != fmt.Sprint(tc.want) {
					t.Errorf("counts = %v, want %v", got, tc.want)
				}
				return
			}
			if err := tc.wantSet(got); err != nil {
				t.Errorf("counts = %v: %v", got, err)
			}
		})
	}
}

func oneEndpointGot(n int) func([]int) error {
	return func(got []int) error {
		for _, g := range got {
			if g == n {
				return nil
			}
		}
		return fmt.Errorf("want one endpoint with all %d requests", n)
	}
}

func allEndpointsGot(min int) func([]int) error {
	return func(got []int) error {
		for i, g := range got {
			if g < min {
				return fmt.Errorf("endpoint %d got %d < %d", i, g, min)
			}
		}
		return nil
	}
}

func TestLeastConnPrefersIdle(t *testing.T) {
	c := testCompiled(t, spec.SelLeastConn, []int{1, 1, 1}, nil)
	c.eps[0].active.Store(3)
	c.eps[1].active.Store(1)
	c.eps[2].active.Store(2)
	for k := range 10 {
		if i := c.pick(&pick.PoolFacts{}, 0); i != 1 {
			t.Fatalf("pick %d = %d, want 1 (fewest active)", k, i)
		}
	}
	if i := c.pick(&pick.PoolFacts{}, bit(1)); i != 2 {
		t.Fatalf("with 1 excluded pick = %d, want 2", i)
	}
}

func TestHashStickyAcrossOtherEndpointDown(t *testing.T) {
	c := testCompiled(t, spec.SelPersist, []int{1, 1, 1, 1}, nil)
	f := &pick.PoolFacts{Session: "bob"}
	home := c.pick(f, 0)
	other := (home + 2) % 4
	c.eps[other].health.Store(healthDown)
	if got := c.pick(f, 0); got != home {
		t.Fatalf("home moved from %d to %d when an unrelated endpoint went down", home, got)
	}
	c.eps[home].health.Store(healthDown)
	if got := c.pick(f, 0); got == home || got < 0 {
		t.Fatalf("pick with home down = %d", got)
	}
}

func TestBreakerSkipsOpenEndpoint(t *testing.T) {
	c := testCompiled(t, spec.SelRoundRobin, []int{1, 1}, nil)
	c.cb = breakerConfig{enabled: true, connectFails: 1, openFor: 3600e9}
	c.pool = c.newPool(c.pool.Candidates())
	c.recordBreaker(0, c.eps[0].br.onDialFailure(&c.cb))
	for range 10 {
		i, _ := c.pickAdmitted(&pick.PoolFacts{}, 0)
		if i != 1 {
			t.Fatalf("picked %d, want 1 (0 is breaker-open)", i)
		}
	}
}

// BenchmarkScan32Baseline is the floor a selector that looks at every
// endpoint cannot beat: one atomic load per endpoint of 32. Report the
// selectors as ratios to it (the box is noisy).
func BenchmarkScan32Baseline(b *testing.B) {
	c := testCompiled(b, spec.SelLeastConn, make32Weights(), nil)
	var sink int64
	cpu := startCPU()
	for b.Loop() {
		for i := range c.slots {
			sink += c.slots[i].ep.active.Load()
		}
	}
	cpu.report(b)
	_ = sink
}

// cpuClock reports process CPU time per op next to wall time: on a shared,
// overloaded box wall ns/op mostly measures waiting for a core.
type cpuClock struct{ start time.Duration }

func startCPU() cpuClock { return cpuClock{start: proccpu.Self()} }

func (c cpuClock) report(b *testing.B) {
	b.ReportMetric(float64(proccpu.Self()-c.start)/float64(b.N), "cpu-ns/op")
}

func make32Weights() []int {
	w := make([]int, 32)
	for i := range w {
		w[i] = 1 + i%4
	}
	return w
}

// BenchmarkSelect32 measures one selection over 32 active endpoints per
// selector. Target: ≤ 200 ns/op and 0 allocs.
func BenchmarkSelect32(b *testing.B) {
	weights := make32Weights()
	for _, sel := range []spec.Selector{spec.SelRoundRobin, spec.SelSourceHash, spec.SelWeightedRR, spec.SelPersist, spec.SelLeastConn} {
		b.Run(sel.String(), func(b *testing.B) {
			c := testCompiled(b, sel, weights, nil)
			c.cb.enabled = true // the realistic path reads the breaker too
			c.pool = c.newPool(c.pool.Candidates())
			f := &pick.PoolFacts{ClientIP: "127.0.0.42", Session: "user-1234"}
			b.ReportAllocs()
			cpu := startCPU()
			for b.Loop() {
				if c.pick(f, 0) < 0 {
					b.Fatal("no pick")
				}
			}
			cpu.report(b)
		})
	}
}
