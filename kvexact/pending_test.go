package kvexact

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestPendingHeld: a placement counts as held by its endpoint, block by
// block from the start, for the TTL after its last note; other endpoints
// and other prompts hold nothing of it.
func TestPendingHeld(t *testing.T) {
	t0 := time.Unix(1000, 0)
	group := []uint64{11, 12, 13, 14, 15, 16} // one prompt's chained keys
	other := []uint64{11, 12, 13, 24, 25}     // shares the first three blocks
	type note struct {
		ep   string
		keys []uint64
		at   time.Duration
	}
	tests := []struct {
		name  string
		notes []note
		ep    string
		keys  []uint64
		at    time.Duration
		want  int
	}{
		{"nothing noted", nil, "a", group, 0, 0},
		{"the whole prompt", []note{{"a", group, 0}}, "a", group, time.Second, 6},
		{"another endpoint holds nothing", []note{{"a", group, 0}}, "b", group, time.Second, 0},
		{"a longer prompt of the group: the noted prefix", []note{{"a", group[:4], 0}}, "a", group, time.Second, 4},
		{"a shorter prompt: all of it", []note{{"a", group, 0}}, "a", group[:3], time.Second, 3},
		{"a prompt sharing three blocks", []note{{"a", group, 0}}, "a", other, time.Second, 3},
		{"a different first block", []note{{"a", group, 0}}, "a", []uint64{99, 12}, time.Second, 0},
		{"expired at the TTL", []note{{"a", group, 0}}, "a", group, 2 * time.Second, 0},
		{"a later note refreshes its prefix", []note{{"a", group, 0}, {"a", group[:2], time.Second}}, "a", group, 2500 * time.Millisecond, 2},
		{"two endpoints keep their own notes", []note{{"a", group, 0}, {"b", group[:2], 0}}, "a", group, time.Second, 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewPending(2 * time.Second)
			for _, n := range tt.notes {
				p.Note(n.ep, n.keys, t0.Add(n.at))
			}
			if got := p.Held(tt.ep, tt.keys, t0.Add(tt.at)); got != tt.want {
				t.Errorf("Held(%s, %v) = %d, want %d", tt.ep, tt.keys, got, tt.want)
			}
		})
	}
}

// TestPendingBounded: expired notes are pruned as new ones come, and the
// table never keeps more than MaxPendingKeys keys however fast notes come.
func TestPendingBounded(t *testing.T) {
	p := NewPending(time.Second)
	t0 := time.Unix(1000, 0)
	keys := make([]uint64, 100)
	for i := 0; i < 3*MaxPendingKeys/len(keys); i++ {
		for j := range keys {
			keys[j] = uint64(i*len(keys) + j + 1)
		}
		p.Note("a", keys, t0) // all at one instant: nothing expires
		if n := p.Len(); n > MaxPendingKeys {
			t.Fatalf("after %d notes: %d keys kept, bound %d", i+1, n, MaxPendingKeys)
		}
	}
	if got := p.Held("a", keys, t0); got != len(keys) {
		t.Errorf("the newest note: Held = %d, want %d (the oldest go first)", got, len(keys))
	}
	p.Note("b", []uint64{1}, t0.Add(2*time.Second))
	if n := p.Len(); n != 1 {
		t.Errorf("after the TTL: %d keys kept, want only the new note's 1", n)
	}
}

// TestPendingConcurrent interleaves notes, lookups and pruning on one
// table, as picks on many goroutines do (run with -race): notes come from
// a shared clock that moves past the TTL many times over, and enough of
// them are live at once to hit MaxPendingKeys. A lookup never finds a
// prompt on an endpoint it was not sent to, never more blocks than asked,
// and the table never outgrows its bound.
func TestPendingConcurrent(t *testing.T) {
	const (
		writers, readers = 4, 4
		rounds           = 300 // per goroutine
		blocks           = 200 // keys per note: 4 writers × 50 live notes > MaxPendingKeys
		ttl              = 50 * time.Millisecond
	)
	p := NewPending(ttl)
	t0 := time.Unix(1000, 0)
	var clock atomic.Int64 // milliseconds since t0, one per note
	now := func() time.Time { return t0.Add(time.Duration(clock.Load()) * time.Millisecond) }
	// prompt is writer w's round-r prompt: its keys name w, so a key of
	// one writer's prompt is never noted on another's endpoint.
	prompt := func(w, r int) []uint64 {
		keys := make([]uint64, blocks)
		for j := range keys {
			keys[j] = uint64(w)<<48 | uint64(r%9)<<32 | uint64(j+1)
		}
		return keys
	}
	endpoint := func(w int) string { return fmt.Sprintf("ep%d", w) }

	start := make(chan struct{})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for r := range rounds {
				clock.Add(1)
				p.Note(endpoint(w), prompt(w, r), now())
			}
		}()
	}
	for rd := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for r := range rounds {
				owner, asked := r%writers, (r+rd)%writers
				keys := prompt(owner, r)
				got := p.Held(endpoint(asked), keys, now())
				switch {
				case got > len(keys):
					t.Errorf("Held = %d of a %d-block prompt", got, len(keys))
					return
				case asked != owner && got != 0:
					t.Errorf("%s holds %d blocks of a prompt only %s was sent", endpoint(asked), got, endpoint(owner))
					return
				}
				if n := p.Len(); n > MaxPendingKeys {
					t.Errorf("%d keys kept, bound %d", n, MaxPendingKeys)
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	// Quiet again: every endpoint's newest note is whole.
	for w := range writers {
		keys := prompt(w, rounds)
		p.Note(endpoint(w), keys, now())
		if got := p.Held(endpoint(w), keys, now()); got != blocks {
			t.Errorf("%s after the run: Held = %d, want %d", endpoint(w), got, blocks)
		}
	}
}

// TestInventoryForgetsPending: whenever the inventory drops an endpoint's
// blocks it drops that endpoint's pending notes too, and only its own, so
// an engine that restarted or cleared its cache is not counted as holding
// the prompts it was sent before.
func TestInventoryForgetsPending(t *testing.T) {
	tests := []struct {
		name string
		lose func(inv *Inventory)
	}{
		{"all blocks cleared", func(inv *Inventory) {
			inv.Apply("a", 0, 1, batchOf(Event{Kind: EventAllBlocksCleared}))
		}},
		{"restart: the sequence went back", func(inv *Inventory) { inv.Apply("a", 0, 0, batchOf()) }},
		{"events lost: the sequence jumped", func(inv *Inventory) { inv.Apply("a", 0, 9, batchOf()) }},
		{"health went down", func(inv *Inventory) { inv.EndpointDown("a") }},
		{"removed from the rule", func(inv *Inventory) { inv.RemoveEndpoint("a") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pending := NewPending(DefaultPendingTTL)
			inv, clk, _ := newTestInv(t, func(o *Options) { o.Pending = pending })
			if r := inv.Apply("a", 0, 0, batchOf()); r.Err != nil { // "a" is known to the inventory
				t.Fatalf("Apply: %+v", r)
			}
			pending.Note("a", prompt, clk.Now())
			pending.Note("b", prompt, clk.Now())
			tt.lose(inv)
			if got := pending.Held("a", prompt, clk.Now()); got != 0 {
				t.Errorf("a holds %d noted blocks after losing its cache, want 0", got)
			}
			if got := pending.Held("b", prompt, clk.Now()); got != len(prompt) {
				t.Errorf("b holds %d noted blocks, want %d: another endpoint's loss took its notes", got, len(prompt))
			}
		})
	}
}
