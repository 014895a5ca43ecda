package pick

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/spec"
)

// liveEndpoint is the state a datapath endpoint owns, for tests.
type liveEndpoint struct {
	health, breaker     atomic.Int32
	inflight, openUntil atomic.Int64
}

func (e *liveEndpoint) live() Live {
	return Live{Health: &e.health, InFlight: &e.inflight, Breaker: &e.breaker, OpenUntil: &e.openUntil}
}

// testPool builds a pool of len(weights) healthy endpoints.
func testPool(sel spec.Selector, weights []int, backup []bool, breakers bool) (*Pool, []*liveEndpoint) {
	eps := make([]*liveEndpoint, len(weights))
	cands := make([]Candidate, len(weights))
	for i, w := range weights {
		eps[i] = &liveEndpoint{}
		eps[i].health.Store(metrics.HealthActive)
		cands[i] = Candidate{ID: "10.0.0." + strconv.Itoa(i+1) + ":8000", Index: i, Weight: w, Live: eps[i].live()}
		if backup != nil {
			cands[i].Backup = backup[i]
		}
	}
	return NewPool(cands, PoolOptions{Selector: sel, Breakers: breakers}), eps
}

// TestEligible is the one definition of "may receive a new request", one
// fact per case.
func TestEligible(t *testing.T) {
	future := time.Now().Add(time.Hour).UnixNano()
	tests := []struct {
		name     string
		weight   int
		backup   bool // candidate in the backup tier
		pass     bool // the pass asks for backups
		excl     uint64
		breakers bool
		set      func(e *liveEndpoint)
		want     bool
	}{
		{name: "healthy primary", weight: 1, want: true},
		{name: "excluded", weight: 1, excl: 1, want: false},
		{name: "draining", weight: 0, want: false},
		{name: "probing", weight: 1, set: func(e *liveEndpoint) { e.health.Store(metrics.HealthProbing) }, want: false},
		{name: "down", weight: 1, set: func(e *liveEndpoint) { e.health.Store(metrics.HealthDown) }, want: false},
		{name: "backup in the primary pass", weight: 1, backup: true, want: false},
		{name: "backup in the backup pass", weight: 1, backup: true, pass: true, want: true},
		{name: "primary in the backup pass", weight: 1, pass: true, want: false},
		{name: "breaker open, window running", weight: 1, breakers: true,
			set: func(e *liveEndpoint) { e.breaker.Store(metrics.BreakerOpen); e.openUntil.Store(future) }, want: false},
		{name: "breaker open, window over", weight: 1, breakers: true,
			set: func(e *liveEndpoint) { e.breaker.Store(metrics.BreakerOpen); e.openUntil.Store(1) }, want: true},
		{name: "breaker half-open", weight: 1, breakers: true,
			set: func(e *liveEndpoint) { e.breaker.Store(metrics.BreakerHalfOpen) }, want: false},
		{name: "breaker ignored when off", weight: 1,
			set: func(e *liveEndpoint) { e.breaker.Store(metrics.BreakerHalfOpen) }, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, eps := testPool(spec.SelRoundRobin, []int{tt.weight}, []bool{tt.backup}, tt.breakers)
			if tt.set != nil {
				tt.set(eps[0])
			}
			var now int64
			if got := p.Eligible(0, tt.excl, tt.pass, &now); got != tt.want {
				t.Fatalf("Eligible = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestPoolPick: each mode's choice over live facts, and the backup tier
// only when no primary is eligible.
func TestPoolPick(t *testing.T) {
	tests := []struct {
		name   string
		sel    spec.Selector
		loads  []int64
		down   []int // endpoints probed down
		backup []bool
		excl   uint64
		want   []int // successive picks
	}{
		{name: "rr rotates", sel: spec.SelRoundRobin, loads: []int64{0, 0, 0}, want: []int{0, 1, 2, 0}},
		{name: "rr skips down", sel: spec.SelRoundRobin, loads: []int64{0, 0, 0}, down: []int{1}, want: []int{0, 2, 0, 2}},
		{name: "rr skips excluded", sel: spec.SelRoundRobin, loads: []int64{0, 0, 0}, excl: 1 << 0, want: []int{1, 2, 1}},
		{name: "least conn takes the minimum", sel: spec.SelLeastConn, loads: []int64{4, 1, 3}, want: []int{1, 1}},
		{name: "least conn skips down minimum", sel: spec.SelLeastConn, loads: []int64{4, 1, 3}, down: []int{1}, want: []int{2}},
		{name: "backup only when no primary", sel: spec.SelRoundRobin, loads: []int64{0, 0}, backup: []bool{false, true},
			down: []int{0}, want: []int{1, 1}},
		{name: "primary preferred over backup", sel: spec.SelRoundRobin, loads: []int64{0, 0}, backup: []bool{false, true},
			want: []int{0, 0}},
		{name: "nothing eligible", sel: spec.SelLeastConn, loads: []int64{0}, down: []int{0}, want: []int{-1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			weights := make([]int, len(tt.loads))
			for i := range weights {
				weights[i] = 1
			}
			p, eps := testPool(tt.sel, weights, tt.backup, true)
			for i, l := range tt.loads {
				eps[i].inflight.Store(l)
			}
			for _, i := range tt.down {
				eps[i].health.Store(metrics.HealthDown)
			}
			for k, want := range tt.want {
				if got := p.Pick(&PoolFacts{}, tt.excl, nil); got != want {
					t.Fatalf("pick %d = %d, want %d", k, got, want)
				}
			}
		})
	}
}

// TestPoolPickAllocates nothing, in every mode.
func TestPoolPickAllocatesNothing(t *testing.T) {
	for _, sel := range []spec.Selector{spec.SelRoundRobin, spec.SelSourceHash, spec.SelWeightedRR, spec.SelPersist, spec.SelLeastConn} {
		p, _ := testPool(sel, []int{1, 2, 3, 4}, nil, true)
		f := &PoolFacts{ClientIP: "127.0.0.1", Session: "s"}
		if n := testing.AllocsPerRun(100, func() { p.Pick(f, 0, nil) }); n != 0 {
			t.Errorf("%s: %v allocs per pick", sel, n)
		}
	}
}
