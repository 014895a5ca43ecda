package ladder

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"

	"github.com/infergate/infergate/radix"
)

func newPrefixTier(t testing.TB, threshold, balance int, budget int64) *PrefixTier {
	t.Helper()
	o := radix.DefaultOptions()
	if budget > 0 {
		o.BudgetBytes = budget
	}
	ix, err := radix.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return NewPrefixTier(PrefixOptions{Index: ix, Threshold: threshold, BalanceAbs: balance})
}

// text builds a deterministic prompt of n bytes from seed.
func text(seed string, n int) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "%s-%d ", seed, i)
	}
	return b.Bytes()[:n]
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func TestPrefixTierPick(t *testing.T) {
	sys := text("system", 2048)
	type stored struct {
		key []byte
		ep  string
	}
	tests := []struct {
		name       string
		threshold  int
		balance    int
		stored     []stored
		key        []byte
		loads      []int // candidates p0, p1, p2
		wantHit    bool
		wantIdx    int
		wantReason string
		minRate    float64
		maxRate    float64
	}{
		{name: "no key", threshold: 20, balance: 3, key: nil, loads: []int{0, 0},
			wantReason: ReasonNoKey},
		{name: "empty index", threshold: 20, balance: 3, key: sys, loads: []int{0, 0},
			wantReason: ReasonEmpty},
		{name: "exact prompt hits its owner", threshold: 20, balance: 3,
			stored: []stored{{sys, "p1"}}, key: sys, loads: []int{0, 0},
			wantHit: true, wantIdx: 1, minRate: 1, maxRate: 1},
		{name: "divergence after shared system prompt", threshold: 20, balance: 3,
			stored: []stored{{cat(sys, text("alice", 2048)), "p2"}},
			key:    cat(sys, text("bob", 2048)), loads: []int{0, 0, 0},
			wantHit: true, wantIdx: 2, minRate: 0.45, maxRate: 0.5},
		{name: "shared part below threshold", threshold: 60, balance: 3,
			stored: []stored{{cat(sys, text("alice", 2048)), "p0"}},
			key:    cat(sys, text("bob", 2048)), loads: []int{0, 0},
			wantReason: ReasonBelowThres, minRate: 0.45, maxRate: 0.5},
		{name: "nothing shared", threshold: 20, balance: 3,
			stored: []stored{{sys, "p0"}}, key: text("other", 4096), loads: []int{0, 0},
			wantReason: ReasonMiss},
		{name: "owner not a candidate is excluded", threshold: 20, balance: 3,
			stored: []stored{{sys, "p9"}}, key: sys, loads: []int{0, 0},
			wantReason: ReasonExcluded, minRate: 1, maxRate: 1},
		{name: "load guard: owner busier by more than balance", threshold: 20, balance: 3,
			stored: []stored{{sys, "p0"}}, key: sys, loads: []int{4, 0},
			wantReason: ReasonLoadGuard, minRate: 1, maxRate: 1},
		{name: "load guard edge: exactly balance above still hits", threshold: 20, balance: 3,
			stored: []stored{{sys, "p0"}}, key: sys, loads: []int{5, 2},
			wantHit: true, wantIdx: 0, minRate: 1, maxRate: 1},
		{name: "guard is per candidate: a hot other endpoint does not matter", threshold: 20, balance: 3,
			stored: []stored{{sys, "p0"}}, key: sys, loads: []int{1, 0, 50},
			wantHit: true, wantIdx: 0, minRate: 1, maxRate: 1},
		{name: "negative balance disables the guard", threshold: 20, balance: -1,
			stored: []stored{{sys, "p0"}}, key: sys, loads: []int{100, 0},
			wantHit: true, wantIdx: 0, minRate: 1, maxRate: 1},
		{name: "most recent owner wins", threshold: 20, balance: 3,
			stored: []stored{{sys, "p0"}, {sys, "p1"}}, key: sys, loads: []int{0, 0},
			wantHit: true, wantIdx: 1, minRate: 1, maxRate: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tier := newPrefixTier(t, tt.threshold, tt.balance, 0)
			for _, s := range tt.stored {
				tier.Observe(&Facts{PromptKey: s.key}, Candidate{ID: s.ep})
			}
			f := &Facts{PromptKey: tt.key}
			c := cands("p", tt.loads...)
			idx, reason, ok := tier.Pick(f, c)
			if ok != tt.wantHit || (ok && idx != tt.wantIdx) || (!ok && reason != tt.wantReason) {
				t.Fatalf("Pick = (%d, %q, %v), want (%d, %q, %v)", idx, reason, ok, tt.wantIdx, tt.wantReason, tt.wantHit)
			}
			e := tier.Explain(f, c)
			if e.Hit != ok || e.Reason != reason {
				t.Fatalf("Explain = %+v disagrees with Pick (%q, %v)", e, reason, ok)
			}
			if e.Rate < tt.minRate || e.Rate > tt.maxRate {
				t.Fatalf("rate %.3f outside [%.3f, %.3f] (%+v)", e.Rate, tt.minRate, tt.maxRate, e)
			}
		})
	}
}

func TestAboveThreshold(t *testing.T) {
	tests := []struct {
		matched, key, percent int
		want                  bool
	}{
		{20, 100, 20, true}, // exactly at the threshold hits
		{19, 100, 20, false},
		{1, 3, 33, true},
		{1, 3, 34, false},
		{100, 100, 100, true},
		{99, 100, 100, false},
		{1, 100, 0, true},
		{0, 100, 0, false},
		{0, 0, 0, false},
	}
	for _, tt := range tests {
		if got := AboveThreshold(tt.matched, tt.key, tt.percent); got != tt.want {
			t.Errorf("AboveThreshold(%d, %d, %d) = %v, want %v", tt.matched, tt.key, tt.percent, got, tt.want)
		}
	}
}

func TestThresholdEdgesThroughIndex(t *testing.T) {
	// A stored 1 KiB prompt and a query that shares its first 512 bytes
	// (a boundary) then differs: rate exactly 0.5.
	base := text("edge", 1024)
	q := append(append([]byte{}, base[:512]...), text("zzz", 512)...)
	for _, tt := range []struct {
		threshold int
		want      bool
	}{{49, true}, {50, true}, {51, false}} {
		tier := newPrefixTier(t, tt.threshold, 3, 0)
		tier.Observe(&Facts{PromptKey: base}, Candidate{ID: "p0"})
		e := tier.Explain(&Facts{PromptKey: q}, cands("p", 0, 0))
		if e.Rate != 0.5 || e.Hit != tt.want {
			t.Errorf("threshold %d: %+v, want rate 0.5 hit %v", tt.threshold, e, tt.want)
		}
	}
}

// One hot endpoint loses its own prompts to the guard while other prompts
// keep their affinity (the guard is per candidate, not fleet-wide).
func TestPerCandidateGuardKeepsOtherAffinity(t *testing.T) {
	tier := newPrefixTier(t, 20, 3, 0)
	a, b := text("tenant-a", 4096), text("tenant-b", 4096)
	tier.Observe(&Facts{PromptKey: a}, Candidate{ID: "p0"})
	tier.Observe(&Facts{PromptKey: b}, Candidate{ID: "p1"})
	c := cands("p", 10, 1, 0) // p0 hot
	if _, reason, ok := tier.Pick(&Facts{PromptKey: a}, c); ok || reason != ReasonLoadGuard {
		t.Fatalf("hot owner: ok=%v reason=%q, want load_guard", ok, reason)
	}
	if idx, _, ok := tier.Pick(&Facts{PromptKey: b}, c); !ok || idx != 1 {
		t.Fatalf("cool owner: idx=%d ok=%v, want p1", idx, ok)
	}
}

// A tier rebuilt on a rule update (same index) still tells an excluded owner
// from a miss when it is given the rule's endpoints.
func TestExcludedAfterRebuild(t *testing.T) {
	first := newPrefixTier(t, 20, 3, 0)
	sys := text("sys", 4096)
	first.Observe(&Facts{PromptKey: sys}, Candidate{ID: "p0"})
	for _, tt := range []struct {
		endpoints []string
		want      string
	}{{nil, ReasonMiss}, {[]string{"p0", "p1"}, ReasonExcluded}} {
		rebuilt := NewPrefixTier(PrefixOptions{Index: first.Index(), Threshold: 20, BalanceAbs: 3, Endpoints: tt.endpoints})
		if _, reason, ok := rebuilt.Pick(&Facts{PromptKey: sys}, cands("p", 0, 0)[1:]); ok || reason != tt.want {
			t.Errorf("endpoints %v: ok=%v reason=%q, want %q", tt.endpoints, ok, reason, tt.want)
		}
	}
}

func TestForgetOnEndpointDown(t *testing.T) {
	tier := newPrefixTier(t, 20, 3, 0)
	sys := text("sys", 4096)
	tier.Observe(&Facts{PromptKey: sys}, Candidate{ID: "p0"})
	if e := tier.Explain(&Facts{PromptKey: sys}, cands("p", 0)); !e.Hit {
		t.Fatalf("before: %+v", e)
	}
	if dropped := tier.Forget("p0"); dropped == 0 {
		t.Fatal("Forget dropped nothing")
	}
	e := tier.Explain(&Facts{PromptKey: sys}, cands("p", 0, 0))
	if e.Hit || e.Reason != ReasonEmpty {
		t.Fatalf("after Forget: %+v, want empty index", e)
	}
	// Another endpoint's prefixes survive.
	tier.Observe(&Facts{PromptKey: sys}, Candidate{ID: "p1"})
	tier.Observe(&Facts{PromptKey: text("x", 4096)}, Candidate{ID: "p0"})
	tier.Forget("p0")
	if idx, _, ok := tier.Pick(&Facts{PromptKey: sys}, cands("p", 0, 0)); !ok || idx != 1 {
		t.Fatalf("p1's prefix lost: idx=%d ok=%v", idx, ok)
	}
}

// Memory stays within the budget over 100k distinct 8 KiB prompts (2k with
// -short), and the most recent prompt still matches.
func TestBudgetBoundsMemory(t *testing.T) {
	const budget = 256 << 10
	tier := newPrefixTier(t, 20, 3, budget)
	ix := tier.Index()
	n := 100_000
	if testing.Short() {
		n = 2000
	}
	key := make([]byte, 8192)
	var last []byte
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	heapBefore := heap()
	for i := range n {
		copy(key, fmt.Sprintf("prompt %08d ", i))
		copy(key[8000:], fmt.Sprintf("%08d", i))
		tier.Observe(&Facts{PromptKey: key}, Candidate{ID: fmt.Sprintf("p%d", i%4)})
		if s := ix.SizeBytes(); s > budget {
			t.Fatalf("after %d prompts: %d bytes > budget %d", i+1, s, budget)
		}
		last = append(last[:0], key...)
	}
	// The real heap, not only the accounting, stays bounded: a few MiB for a
	// 256 KiB budget whatever the number of prompts.
	if grew := int64(heap()) - int64(heapBefore); grew > 8<<20 {
		t.Fatalf("heap grew %d bytes over %d prompts with a %d-byte budget", grew, n, budget)
	}
	if st := ix.Stats(); st.Evictions == 0 {
		t.Fatalf("no evictions over %d prompts: %+v", n, st)
	}
	e := tier.Explain(&Facts{PromptKey: last}, cands("p", 0, 0, 0, 0))
	if !e.Hit || e.Rate != 1 {
		t.Fatalf("most recent prompt no longer matches: %+v", e)
	}
}

func TestOnLookupReportsRate(t *testing.T) {
	ix, _ := radix.New(radix.DefaultOptions())
	var rates []float64
	tier := NewPrefixTier(PrefixOptions{Index: ix, Threshold: 20, BalanceAbs: 3,
		OnLookup: func(r float64) { rates = append(rates, r) }})
	sys := text("s", 2048)
	tier.Pick(&Facts{PromptKey: sys}, cands("p", 0)) // empty index: 0
	tier.Observe(&Facts{PromptKey: sys}, Candidate{ID: "p0"})
	tier.Pick(&Facts{PromptKey: sys}, cands("p", 0))    // exact: 1
	tier.Pick(&Facts{}, cands("p", 0))                  // no key: not observed
	tier.DryPick(&Facts{PromptKey: sys}, cands("p", 0)) // dry run: not observed
	if fmt.Sprint(rates) != "[0 1]" {
		t.Fatalf("rates %v, want [0 1]", rates)
	}
}

// The tier inside the real ladder: the first request falls to Tier 2 and is
// observed, the next one with the same system prompt follows it.
func TestPrefixTierInLadder(t *testing.T) {
	tier := newPrefixTier(t, 20, 3, 0)
	l := New(nil, tier)
	sys := text("sys", 4096)
	tr, _ := l.SelectPair(&Facts{PromptKey: cat(sys, []byte("q1"))}, cands("p", 1, 0, 1), cands("d", 0))
	first := tr.Prefill.ID
	if first != "p1" {
		t.Fatalf("first request went to %s, want least loaded p1", first)
	}
	tr, _ = l.SelectPair(&Facts{PromptKey: cat(sys, []byte("q2"))}, cands("p", 0, 2, 0), cands("d", 0))
	if tr.Prefill.ID != first || tr.Steps[0].Tier != TierPrefix || !tr.Steps[0].Hit {
		t.Fatalf("second request: %+v, want tier-1 hit on %s", tr, first)
	}
}
