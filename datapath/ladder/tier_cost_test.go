package ladder

import (
	"testing"
	"time"

	"github.com/infergate/infergate/datapath/pick"
	"github.com/infergate/infergate/radix"
)

// With a cost model the prefix rung keeps its holder while the holder,
// with the matched prefix cached, is estimated faster than every cold
// candidate: a hair of load keeps the hit, a real queue loses it.
func TestPrefixTierCostGuard(t *testing.T) {
	sys := text("system", 8000) // ≈ 2,000 tokens: 530 ms cold
	for _, tc := range []struct {
		name       string
		loads      []int // p0 (holder), p1
		engine     pick.EngineLoad
		wantHit    bool
		wantReason string
	}{
		{"idle holder", []int{0, 0}, pick.EngineLoad{}, true, ""},
		{"a hair of load keeps the hit (the in-flight guard of 3 tripped)", []int{6, 0}, pick.EngineLoad{}, true, ""},
		{"a 40-request queue loses to an idle cold engine", []int{1, 0}, pick.EngineLoad{Valid: true, Running: 16, Waiting: 40, KVUsage: -1}, false, ReasonLoadGuard},
		{"KV pressure below the prefill saved keeps the hit", []int{0, 0}, pick.EngineLoad{Valid: true, KVUsage: 0.85, Running: 1}, true, ""},
		{"a nearly full KV cache costs more than the hit saves", []int{0, 0}, pick.EngineLoad{Valid: true, KVUsage: 0.99, Running: 1}, false, ReasonLoadGuard},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ix, err := radix.New(radix.DefaultOptions())
			if err != nil {
				t.Fatal(err)
			}
			tier := NewPrefixTier(PrefixOptions{Index: ix, BalanceAbs: 3, Costs: pick.NewCosts(pick.DefaultCostModel())})
			tier.Observe(&Facts{PromptKey: sys}, Candidate{ID: "p0"})
			cands := []Candidate{{ID: "p0", Load: tc.loads[0], Engine: tc.engine}, {ID: "p1", Index: 1, Load: tc.loads[1]}}
			idx, reason, ok := tier.Pick(&Facts{PromptKey: sys, Now: time.Unix(1, 0)}, cands)
			if ok != tc.wantHit || reason != tc.wantReason || (ok && idx != 0) {
				t.Fatalf("pick = %d %q %v, want hit %v reason %q", idx, reason, ok, tc.wantHit, tc.wantReason)
			}
		})
	}
}

// The priced ladder: prompts that miss every cache go where their prefill
// starts soonest, so two misses sent together do not queue on one engine,
// and a queue another client built on an engine keeps work away from it.
func TestLadderCostLoad(t *testing.T) {
	now := time.Unix(1, 0)
	l := New(nil).WithCosts(pick.NewCosts(pick.DefaultCostModel()))
	prefills := []Candidate{{ID: "p0"}, {ID: "p1", Index: 1}, {ID: "p2", Index: 2, Engine: pick.EngineLoad{Valid: true, Running: 16, Waiting: 30, KVUsage: -1}}}
	decodes := []Candidate{{ID: "d0"}}
	seen := map[string]int{}
	for i := range 4 {
		f := &Facts{PromptTokens: 2200, Now: now.Add(time.Duration(i) * time.Millisecond)}
		tr, ok := l.SelectPair(f, prefills, decodes)
		if !ok {
			t.Fatal("no pair")
		}
		seen[tr.Prefill.ID]++
	}
	if seen["p0"] != 2 || seen["p1"] != 2 || seen["p2"] != 0 {
		t.Fatalf("placements %v, want 2 on p0, 2 on p1, none on the engine with a queue", seen)
	}
}

// The priced rendezvous rung keeps the key's winner unless it is
// estimated slower, prompt cached, than a cold candidate.
func TestRendezvousCostGuard(t *testing.T) {
	costs := pick.NewCosts(pick.DefaultCostModel())
	f := &Facts{PromptKey: text("conv", 8000), Now: time.Unix(1, 0)}
	cands := []Candidate{{ID: "p0"}, {ID: "p1", Index: 1}, {ID: "p2", Index: 2}}
	w := pick.Rendezvous(cands, f.Key())
	if i, _, ok := (rendezvousTier{costs: costs}).Pick(f, cands); !ok || i != w {
		t.Fatalf("idle winner: pick %d %v, want %d", i, ok, w)
	}
	cands[w].Engine = pick.EngineLoad{Valid: true, Running: 16, Waiting: 40, KVUsage: -1}
	if _, reason, ok := (rendezvousTier{costs: costs}).Pick(f, cands); ok || reason != ReasonLoadGuard {
		t.Fatalf("queued winner: ok %v reason %q, want load_guard", ok, reason)
	}
}
