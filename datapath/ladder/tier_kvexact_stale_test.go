package ladder

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/kvexact"
)

type stepClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *stepClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *stepClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestKVExactObserveMarksWork: the ladder tells Tier 1.5's inventory where
// each request went, so an endpoint that keeps winning on a cache whose
// event feed stopped loses trust after StaleAfter instead of forever, while
// an endpoint that got no work stays trusted.
func TestKVExactObserveMarksWork(t *testing.T) {
	const staleAfter = 10 * time.Second
	clk := &stepClock{t: time.Unix(1_800_000_000, 0)}
	inv := kvexact.NewInventory(kvexact.Options{Rule: "r", BlockSize: 16, Clock: clk, StaleAfter: staleAfter})
	tokens := make([]uint32, 64)
	for i := range tokens {
		tokens[i] = uint32(i * 7)
	}
	for e, ep := range []string{"ep0", "ep1"} {
		ev := kvexact.Event{Kind: kvexact.EventBlockStored, BlockSize: 16, TokenIDs: tokens[:(e+1)*16]}
		for b := 0; b <= e; b++ {
			ev.BlockHashes = append(ev.BlockHashes, uint64(1000*e+b+1))
		}
		inv.Apply(ep, 0, 0, kvexact.Batch{Events: []kvexact.Event{ev}})
		if err := inv.SetConnected(ep, 0, true); err != nil {
			t.Fatal(err)
		}
		if err := inv.MarkRebuilt(ep, 0); err != nil {
			t.Fatal(err)
		}
	}
	l := New(nil, NewKVExact(KVExactOptions{Rule: "r", Index: inv, LoadGuard: -1}))
	prefills := []Candidate{{ID: "ep0"}, {ID: "ep1", Index: 1}}
	decodes := []Candidate{{ID: "d0"}}
	pick := func() Trace {
		t.Helper()
		tr, ok := l.SelectPair(&Facts{Ctx: context.Background(), Tokens: tokens, Now: clk.Now()}, prefills, decodes)
		if !ok {
			t.Fatal("SelectPair: no pair")
		}
		return tr
	}
	if tr := pick(); tr.Prefill.ID != "ep1" {
		t.Fatalf("first pick %q, want ep1 (holds 2 blocks)", tr.Prefill.ID)
	}
	clk.Advance(staleAfter + time.Second)
	if ok, why := inv.Trusted("ep1"); ok || why != kvexact.ReasonStale {
		t.Errorf("ep1 after work and no event: Trusted = %v, %q; want false, %q", ok, why, kvexact.ReasonStale)
	}
	if ok, why := inv.Trusted("ep0"); !ok {
		t.Errorf("ep0 got no work: Trusted = false, %q; want trusted", why)
	}
	if tr := pick(); tr.Prefill.ID != "ep0" {
		t.Errorf("pick with ep1 stale = %q, want ep0 (the only trusted holder)", tr.Prefill.ID)
	}
	// Explain is a dry run: it must not start ep0's clock.
	clk.Advance(staleAfter + time.Second)
	inv.Apply("ep0", 0, 1, kvexact.Batch{}) // ep0's feed answers its work
	if _, ok := l.Explain(&Facts{Ctx: context.Background(), Tokens: tokens, Now: clk.Now()}, prefills, decodes); !ok {
		t.Fatal("Explain: no pair")
	}
	clk.Advance(staleAfter + time.Second)
	if ok, why := inv.Trusted("ep0"); !ok {
		t.Errorf("ep0 after Explain only: Trusted = false, %q; want trusted", why)
	}
}

// TestKVExactPendingPD: on a P/D rule the ladder notes a cold prompt on
// the prefill it chose, the engine that computes the blocks, not on the
// decode; the prompt's next request, sent before any event, goes to that
// prefill through the KV-exact tier even when it is now the busier one;
// and Explain, a dry run, notes nothing.
func TestKVExactPendingPD(t *testing.T) {
	clk := &stepClock{t: time.Unix(1_800_000_000, 0)}
	inv := kvexact.NewInventory(kvexact.Options{Rule: "r", BlockSize: 16, Clock: clk})
	for _, ep := range []string{"p0", "p1"} {
		if err := inv.SetConnected(ep, 0, true); err != nil {
			t.Fatal(err)
		}
		if err := inv.MarkRebuilt(ep, 0); err != nil {
			t.Fatal(err)
		}
	}
	pending := kvexact.NewPending(time.Second)
	l := New(nil, NewKVExact(KVExactOptions{Rule: "r", Index: inv, LoadGuard: 3, Pending: pending}))
	tokens := make([]uint32, 64) // four blocks
	for i := range tokens {
		tokens[i] = uint32(9000 + i)
	}
	keys := inv.RequestKeys(tokens)
	decodes := []Candidate{{ID: "d0", Index: 2}, {ID: "d1", Index: 3}}
	facts := func() *Facts { return &Facts{Ctx: context.Background(), Tokens: tokens, Now: clk.Now()} }

	if _, ok := l.Explain(facts(), []Candidate{{ID: "p0"}, {ID: "p1", Index: 1}}, decodes); !ok {
		t.Fatal("Explain: no pair")
	}
	if n := pending.Len(); n != 0 {
		t.Fatalf("Explain noted %d keys, want none", n)
	}
	first, ok := l.SelectPair(facts(), []Candidate{{ID: "p0"}, {ID: "p1", Index: 1}}, decodes)
	if !ok {
		t.Fatal("SelectPair: no pair")
	}
	for _, ep := range []Candidate{first.Prefill, first.Decode} {
		want := 0
		if ep.ID == first.Prefill.ID {
			want = len(keys)
		}
		if got := pending.Held(ep.ID, keys, clk.Now()); got != want {
			t.Errorf("%s holds %d of the prompt's %d blocks after the placement, want %d", ep.ID, got, len(keys), want)
		}
	}
	clk.Advance(500 * time.Millisecond)
	// The first prefill now runs the first request; the other is idle.
	prefills := []Candidate{{ID: "p0"}, {ID: "p1", Index: 1}}
	for i := range prefills {
		if prefills[i].ID == first.Prefill.ID {
			prefills[i].Load = 1
		}
	}
	again, ok := l.SelectPair(facts(), prefills, decodes)
	if !ok {
		t.Fatal("SelectPair: no pair")
	}
	if again.Prefill.ID != first.Prefill.ID || len(again.Steps) == 0 || again.Steps[0].Tier != TierKVExact || !again.Steps[0].Hit {
		t.Errorf("repeat: prefill %s, steps %+v; want %s by %s", again.Prefill.ID, again.Steps, first.Prefill.ID, TierKVExact)
	}
}
