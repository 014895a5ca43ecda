package radix

import (
	"fmt"
	"slices"
	"testing"
)

// FuzzIndexInvariants runs random insert/match/remove sequences (the program
// is the fuzz input) against a small index and checks:
//   - Match only ever returns a candidate, with 0 < matched <= len(key);
//   - SizeBytes never exceeds the budget and equals the accounted entries;
//   - with an ample budget and at most maxOwners endpoints, matchedBytes is
//     exactly the brute-force deepest common boundary (or the
//     whole key on an exact match) over the keys each candidate inserted
//     since it was last removed.
func FuzzIndexInvariants(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, uint16(0))
	f.Add([]byte{0x10, 0x21, 0x32, 0x43, 0x10, 0x55, 0x66, 0x77, 0x03, 0x13}, uint16(6))
	f.Add([]byte("insert match remove evict insert match"), uint16(3))
	const chunk = 16 // with 2 steps per doubling, boundaries 16 32 48 64 96 128 192
	eps := []string{"a", "b", "c", "d"}
	f.Fuzz(func(t *testing.T, prog []byte, budgetEntries uint16) {
		steps := []int{0, 2, 8}[budgetEntries>>14%3]
		if len(prog) > 512 {
			prog = prog[:512]
		}
		ample := budgetEntries&0x3fff == 0
		budget := int64(budgetEntries%64)*entryBytes + 2*nameCost("a")
		if ample {
			budget = 1 << 30
		}
		ix, err := New(Options{ChunkBytes: chunk, StepsPerDoubling: steps, MaxKeyBytes: 160, BudgetBytes: budget})
		if err != nil {
			t.Fatal(err)
		}
		// Keys are drawn from a tiny family that shares prefixes often.
		keyOf := func(b byte) []byte {
			n := 1 + int(b%7)*29 // 1..175 bytes, on a boundary or not
			k := make([]byte, n)
			for i := range k {
				k[i] = 'a'
				if i >= int(b>>4)*11 { // diverge at a byte position set by b
					k[i] = 'a' + b%3
				}
			}
			return k
		}
		owned := map[string][][]byte{} // endpoint -> keys inserted since last removal
		for i := 0; i+1 < len(prog); i += 2 {
			op, arg := prog[i], prog[i+1]
			ep := eps[int(op>>2)%len(eps)]
			key := keyOf(arg)
			switch op % 4 {
			case 0, 1:
				ix.Insert(key, ep)
				owned[ep] = append(owned[ep], key)
			case 2:
				var cands []string
				for j, e := range eps {
					if op&(1<<(4+j)) != 0 {
						cands = append(cands, e)
					}
				}
				got, matched, ok := ix.Match(key, cands)
				if ok && (!slices.Contains(cands, got) || matched <= 0 || matched > len(key)) {
					t.Fatalf("Match(%q, %v) = (%q, %d): not a candidate or bad length", key, cands, got, matched)
				}
				if !ample {
					break
				}
				want, wantEPs := 0, map[string]bool{}
				for _, c := range cands {
					for _, k := range owned[c] {
						m := sharedIndexed(ix, ix.clip(key), ix.clip(k))
						if m > want {
							want, wantEPs = m, map[string]bool{}
						}
						if m == want && m > 0 {
							wantEPs[c] = true
						}
					}
				}
				if matched != want || (ok && !wantEPs[got]) || ok != (want > 0) {
					t.Fatalf("Match(%q, %v) = (%q, %d, %v), brute force %d by %v", key, cands, got, matched, ok, want, wantEPs)
				}
			case 3:
				ix.RemoveEndpoint(ep)
				delete(owned, ep)
			}
			s := ix.Stats()
			if s.SizeBytes > budget {
				t.Fatalf("size %d over budget %d", s.SizeBytes, budget)
			}
			if s.SizeBytes != int64(s.Entries)*entryBytes+ix.eps.bytes {
				t.Fatalf("size %d disagrees with %d entries", s.SizeBytes, s.Entries)
			}
		}
		checkLinks(t, ix)
	})
}

// sharedIndexed is what an ideal index would match for query q against a
// stored key k: the whole key if equal, else the deepest boundary within
// their common prefix.
func sharedIndexed(ix *Index, q, k []byte) int {
	if string(q) == string(k) {
		return len(q)
	}
	c, last := commonPrefix(q, k), 0
	for b := ix.chunk; b <= c; b = ix.next(b) {
		last = b
	}
	return last
}

// checkLinks verifies the LRU list and the map agree.
func checkLinks(t *testing.T, ix *Index) {
	t.Helper()
	seen := 0
	prev := none
	for i := ix.head; i != none; i = ix.nodes.at(i).next {
		if ix.nodes.at(i).prev != prev {
			t.Fatalf("node %d prev %d, want %d", i, ix.nodes.at(i).prev, prev)
		}
		if got, ok := ix.byHash[ix.nodes.at(i).hash]; !ok || got != i {
			t.Fatalf("node %d not in map", i)
		}
		prev = i
		seen++
		if seen > ix.nodes.len() {
			t.Fatal("LRU list has a cycle")
		}
	}
	if prev != ix.tail || seen != ix.live || seen != len(ix.byHash) {
		t.Fatal(fmt.Sprintf("list %d nodes, live %d, map %d, tail ok %v", seen, ix.live, len(ix.byHash), prev == ix.tail))
	}
}
