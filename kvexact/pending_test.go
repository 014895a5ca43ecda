package kvexact

import (
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
