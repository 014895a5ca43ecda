package pick

import (
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
)

func cands(role string, loads ...int) []Candidate {
	out := make([]Candidate, len(loads))
	for i, l := range loads {
		out[i] = Candidate{ID: fmt.Sprintf("%s%d", role, i), Index: i, Load: l}
	}
	return out
}

func hrwCands(n int) []Candidate {
	c := make([]Candidate, n)
	for i := range c {
		c[i] = Candidate{ID: "10.0.0." + strconv.Itoa(i+1) + ":8000", Index: i}
	}
	return c
}

func TestLeastLoaded(t *testing.T) {
	tests := []struct {
		name  string
		loads []int
		want  []int // successive picks
	}{
		{"single", []int{7}, []int{0, 0}},
		{"strict minimum always wins", []int{3, 1, 2}, []int{1, 1, 1}},
		{"exact ties rotate", []int{2, 2, 5}, []int{0, 1, 0, 1}},
		{"three-way tie", []int{0, 0, 0}, []int{0, 1, 2, 0}},
		{"tie only among minimum", []int{4, 1, 9, 1}, []int{1, 3, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cur atomic.Uint64
			c := cands("p", tt.loads...)
			for i, want := range tt.want {
				if got := LeastLoaded(c, &cur); got != want {
					t.Fatalf("pick %d: got %d, want %d", i, got, want)
				}
			}
		})
	}
}

func TestLoadGuardTrips(t *testing.T) {
	tests := []struct {
		load, min, balance int
		want               bool
	}{
		{3, 0, 3, false},
		{4, 0, 3, true},
		{0, 0, 0, false},
		{1, 0, 0, true},
		{100, 0, -1, false},
	}
	for _, tt := range tests {
		if got := LoadGuardTrips(tt.load, tt.min, tt.balance); got != tt.want {
			t.Errorf("LoadGuardTrips(%d, %d, %d) = %v, want %v", tt.load, tt.min, tt.balance, got, tt.want)
		}
	}
}

// TestRendezvous: the winner depends on the key and the set, not the order
// candidates are listed in; removing a loser never moves a key; keys spread
// over all candidates.
func TestRendezvous(t *testing.T) {
	c := hrwCands(4)
	wins := map[string]int{}
	const keys = 4000
	for k := uint64(1); k <= keys; k++ {
		w := c[Rendezvous(c, k)].ID
		wins[w]++
		rev := slices.Clone(c)
		slices.Reverse(rev)
		if got := rev[Rendezvous(rev, k)].ID; got != w {
			t.Fatalf("key %d: winner %s in one order, %s in another", k, w, got)
		}
		for i := range c {
			if c[i].ID == w {
				continue
			}
			less := slices.Delete(slices.Clone(c), i, i+1)
			if got := less[Rendezvous(less, k)].ID; got != w {
				t.Fatalf("key %d moved from %s to %s when loser %s left", k, w, got, c[i].ID)
			}
		}
	}
	for _, cand := range c {
		if n := wins[cand.ID]; n < keys/8 || n > keys*3/8 {
			t.Errorf("%s won %d of %d keys, want about a quarter: %v", cand.ID, n, keys, wins)
		}
	}
}

// TestLeastLoadedKeyed: only exact ties are decided by the key; a less
// loaded candidate always wins; key 0 rotates as LeastLoaded does.
func TestLeastLoadedKeyed(t *testing.T) {
	c := hrwCands(3)
	c[0].Load, c[1].Load, c[2].Load = 2, 1, 1
	var cur atomic.Uint64
	for k := uint64(1); k < 200; k++ {
		i := LeastLoadedKeyed(c, k, &cur)
		if c[i].Load != 1 {
			t.Fatalf("key %d picked load %d over load 1", k, c[i].Load)
		}
		tied := []Candidate{c[1], c[2]}
		if want := tied[Rendezvous(tied, k)].ID; c[i].ID != want {
			t.Fatalf("key %d: %s, want the tie's rendezvous winner %s", k, c[i].ID, want)
		}
	}
	seen := map[int]bool{}
	for range 4 {
		seen[LeastLoadedKeyed(c, 0, &cur)] = true
	}
	if len(seen) != 2 {
		t.Fatalf("key 0 did not rotate over the tie: %v", seen)
	}
}
