package ladder

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/infergate/infergate/datapath/pick"
	"github.com/infergate/infergate/radix"
)

func hrwCands(n int) []Candidate {
	c := make([]Candidate, n)
	for i := range c {
		c[i] = Candidate{ID: "10.0.0." + strconv.Itoa(i+1) + ":8000", Index: i}
	}
	return c
}

func replicaLadder(t testing.TB, replicated bool) *Ladder {
	t.Helper()
	ix, err := radix.New(radix.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	l := New(NewSessions(time.Hour, 0), NewPrefixTier(PrefixOptions{Index: ix, Threshold: 20, BalanceAbs: 3}))
	if replicated {
		l.Replicated()
	}
	return l
}

// TestReplicatedSessionsAgree: the first request of a conversation lands on
// the same prefill on each of three replicas that share nothing; the load
// guard of the replica that sees the winner busy still overrides it.
func TestReplicatedSessionsAgree(t *testing.T) {
	reps := []*Ladder{replicaLadder(t, true), replicaLadder(t, true), replicaLadder(t, true)}
	p, d := hrwCands(4), []Candidate{{ID: "10.0.1.1:8000"}}
	now := time.Now()
	for s := range 300 {
		f := Facts{SessionKey: fmt.Sprintf("conversation-%d", s), PromptKey: []byte(fmt.Sprintf("hello %d", s)), Now: now}
		var first string
		for i, l := range reps {
			tr, ok := l.SelectPair(&f, p, d)
			if !ok {
				t.Fatal("no pair")
			}
			if i == 0 {
				first = tr.Prefill.ID
				if tr.Steps[1].Tier != TierRendezvous || !tr.Steps[1].Hit {
					t.Fatalf("first request steps %v, want a session miss then a rendezvous hit", tr.Steps)
				}
			} else if tr.Prefill.ID != first {
				t.Fatalf("session %d: replica %d chose %s, replica 0 %s", s, i, tr.Prefill.ID, first)
			}
		}
	}
	// Replica 0 sees the winner of a new session busy: its guard wins.
	f := Facts{SessionKey: "busy", Now: now}
	busy := slices.Clone(p)
	w := pick.Rendezvous(busy, f.Key())
	busy[w].Load = pick.DefaultSessionGuard + 1
	tr, _ := reps[0].SelectPair(&f, busy, d)
	if tr.Prefill.ID == busy[w].ID {
		t.Fatalf("load guard ignored: %v", tr.Steps)
	}
	// Without Replicated the ladder behaves as it always did: a miss goes
	// through the tiers and ties rotate.
	plain := replicaLadder(t, false)
	tr, _ = plain.SelectPair(&Facts{SessionKey: "x", Now: now}, p, d)
	if tr.Steps[0].Reason != ReasonMiss || slices.ContainsFunc(tr.Steps, func(s Step) bool { return s.Tier == TierRendezvous }) {
		t.Fatalf("unreplicated ladder steps %v", tr.Steps)
	}
}

// simulateReplicas sends a shared-prefix workload (systems system prompts,
// unique tails) spread evenly over n replicas that share nothing and
// returns the rate at which the chosen prefill still had the request's
// system prompt in its (bounded, LRU) prefix cache, and the Tier 1 hit
// rate. Each replica knows only its own in-flight requests (window of 8).
func simulateReplicas(t testing.TB, n int, replicated bool, requests, systems int) (cacheRate, tier1Rate float64) {
	reps := make([]*Ladder, n)
	inflight := make([][]int, n)
	for i := range reps {
		reps[i] = replicaLadder(t, replicated)
	}
	p, d := hrwCands(4), []Candidate{{ID: "10.0.1.1:8000"}}
	// Each engine's prefix cache holds cacheSystems system prompts (LRU):
	// a quarter of the systems plus slack, so a clean partition fits and
	// scattering one system over engines evicts others.
	cacheSystems := systems/len(p) + systems/16
	cache := map[string][]int{}
	r := rand.New(rand.NewPCG(3, 4))
	sys := make([][]byte, systems)
	for i := range sys {
		sys[i] = make([]byte, 2048)
		fillBench(r, sys[i])
	}
	hits, t1 := 0, 0
	now := time.Now()
	for q := range requests {
		rep := q % n
		s := r.IntN(systems)
		key := append(slices.Clone(sys[s]), []byte(fmt.Sprintf(" question %d", q))...)
		cands := slices.Clone(p)
		for _, c := range inflight[rep] {
			cands[c].Load++
		}
		tr, _ := reps[rep].SelectPair(&Facts{PromptKey: key, Now: now}, cands, d)
		if slices.ContainsFunc(tr.Steps, func(st Step) bool { return st.Tier == TierPrefix && st.Hit }) {
			t1++
		}
		lru := cache[tr.Prefill.ID]
		if i := slices.Index(lru, s); i >= 0 {
			hits++
			lru = slices.Delete(lru, i, i+1)
		}
		lru = append(lru, s)
		if len(lru) > cacheSystems {
			lru = lru[1:]
		}
		cache[tr.Prefill.ID] = lru
		inflight[rep] = append(inflight[rep], tr.Prefill.Index)
		if len(inflight[rep]) > 8 {
			inflight[rep] = inflight[rep][1:]
		}
	}
	return float64(hits) / float64(requests), float64(t1) / float64(requests)
}

// TestPrefixAffinityAcrossReplicas measures the engine-side prefix reuse
// of Tier 1 at 1 and 3 replicas, with and without the prefix-seeded
// (replicated) choice, on one workload, and checks that seeding does not
// make three replicas worse than three unseeded ones. The figures are
// logged (docs/replicas.md quotes them).
func TestPrefixAffinityAcrossReplicas(t *testing.T) {
	const requests, systems = 6000, 64
	type row struct {
		n          int
		replicated bool
	}
	got := map[row][2]float64{}
	for _, rw := range []row{{1, false}, {3, false}, {1, true}, {3, true}} {
		c, h := simulateReplicas(t, rw.n, rw.replicated, requests, systems)
		got[rw] = [2]float64{c, h}
		t.Logf("replicas=%d replicated=%v: prefix reuse %.3f, tier1 hit rate %.3f", rw.n, rw.replicated, c, h)
	}
	if got[row{3, true}][0] < got[row{3, false}][0] {
		t.Fatalf("prefix-seeded choice reuses less at 3 replicas (%.3f) than unseeded (%.3f)", got[row{3, true}][0], got[row{3, false}][0])
	}
}

// BenchmarkChoice compares the request-path cost of today's choice
// (rotation on ties, session miss falls through) with the replica-
// consistent one, on a new session each iteration over 8 candidates.
func BenchmarkChoice(b *testing.B) {
	p, d := hrwCands(8), []Candidate{{ID: "10.0.1.1:8000"}, {ID: "10.0.1.2:8000"}}
	key := make([]byte, 2048)
	fillBench(rand.New(rand.NewPCG(5, 6)), key)
	for _, replicated := range []bool{false, true} {
		name := "today"
		if replicated {
			name = "replicated_hrw"
		}
		b.Run(name, func(b *testing.B) {
			l := New(nil) // no session table, no tiers: the choice alone
			if replicated {
				l.Replicated()
			}
			f := Facts{PromptKey: key, Now: time.Now()}
			for b.Loop() {
				fc := f // fresh facts per request: the key is hashed every time
				l.SelectPair(&fc, p, d)
			}
		})
		b.Run(name+"_sessions", func(b *testing.B) {
			l := New(NewSessions(time.Hour, 0))
			if replicated {
				l.Replicated()
			}
			i := 0
			for b.Loop() {
				f := &Facts{SessionKey: "s" + strconv.Itoa(i%50000), Now: time.Now()}
				l.SelectPair(f, p, d)
				i++
			}
		})
	}
}
