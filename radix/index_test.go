package radix

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
)

func newTestIndex(t testing.TB, mutate func(*Options)) *Index {
	t.Helper()
	o := DefaultOptions()
	o.ChunkBytes = 16
	if mutate != nil {
		mutate(&o)
	}
	ix, err := New(o)
	if err != nil {
		t.Fatalf("New(%+v): %v", o, err)
	}
	return ix
}

// text builds a key of n bytes from a seed, distinct per seed.
func text(seed string, n int) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "%s-%d|", seed, i)
	}
	return b.Bytes()[:n]
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

type insert struct {
	key []byte
	ep  string
}

func TestMatch(t *testing.T) {
	sys := text("system", 64) // 4 chunks of 16
	a := cat(sys, text("alice", 40))
	b := cat(sys, text("bob", 40))
	short := []byte("hi")
	tests := []struct {
		name        string
		inserts     []insert
		query       []byte
		candidates  []string
		wantEP      string
		wantMatched int
		wantOK      bool
	}{
		{name: "empty index", query: a, candidates: []string{"e1"}},
		{name: "exact key", inserts: []insert{{a, "e1"}}, query: a, candidates: []string{"e1"}, wantEP: "e1", wantMatched: len(a), wantOK: true},
		{name: "diverge after shared system prompt", inserts: []insert{{a, "e1"}}, query: b, candidates: []string{"e1"}, wantEP: "e1", wantMatched: 64, wantOK: true},
		{name: "stored key is a prefix of query", inserts: []insert{{sys, "e1"}}, query: a, candidates: []string{"e1"}, wantEP: "e1", wantMatched: 64, wantOK: true},
		{name: "query is a prefix of stored key", inserts: []insert{{a, "e1"}}, query: sys, candidates: []string{"e1"}, wantEP: "e1", wantMatched: 64, wantOK: true},
		{name: "partial chunk shared is not counted", inserts: []insert{{a, "e1"}}, query: cat(sys, text("alicX", 40)), candidates: []string{"e1"}, wantEP: "e1", wantMatched: 64, wantOK: true},
		{name: "short key exact", inserts: []insert{{short, "e1"}}, query: short, candidates: []string{"e1"}, wantEP: "e1", wantMatched: 2, wantOK: true},
		{name: "short key different", inserts: []insert{{short, "e1"}}, query: []byte("ho"), candidates: []string{"e1"}},
		{name: "most recent owner wins", inserts: []insert{{a, "e1"}, {b, "e2"}}, query: cat(sys, text("carol", 40)), candidates: []string{"e1", "e2"}, wantEP: "e2", wantMatched: 64, wantOK: true},
		{name: "deeper match beats recency", inserts: []insert{{a, "e1"}, {b, "e2"}}, query: a, candidates: []string{"e1", "e2"}, wantEP: "e1", wantMatched: len(a), wantOK: true},
		{name: "non-candidate owner is skipped for older candidate", inserts: []insert{{a, "e1"}, {a, "e2"}}, query: a, candidates: []string{"e1"}, wantEP: "e1", wantMatched: len(a), wantOK: true},
		{name: "deepest candidate-owned prefix", inserts: []insert{{sys, "e1"}, {a, "e2"}}, query: a, candidates: []string{"e1"}, wantEP: "e1", wantMatched: 64, wantOK: true},
		{name: "no candidate owns anything", inserts: []insert{{a, "e1"}}, query: a, candidates: []string{"e9"}},
		{name: "nil candidates match nothing", inserts: []insert{{a, "e1"}}, query: a},
		{name: "empty query", inserts: []insert{{a, "e1"}}, query: nil, candidates: []string{"e1"}},
		{name: "nothing shared", inserts: []insert{{a, "e1"}}, query: text("other", 100), candidates: []string{"e1"}},
		{name: "long keys diverging late", inserts: []insert{{cat(sys, text("x", 100)), "e1"}}, query: cat(sys, text("y", 100)), candidates: []string{"e1"}, wantEP: "e1", wantMatched: 64, wantOK: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ix := newTestIndex(t, nil)
			for _, in := range tc.inserts {
				ix.Insert(in.key, in.ep)
			}
			ep, matched, ok := ix.Match(tc.query, tc.candidates)
			if ep != tc.wantEP || matched != tc.wantMatched || ok != tc.wantOK {
				t.Errorf("Match = (%q, %d, %v), want (%q, %d, %v)", ep, matched, ok, tc.wantEP, tc.wantMatched, tc.wantOK)
			}
		})
	}
}

func TestGeometricBoundaries(t *testing.T) {
	ix := newTestIndex(t, func(o *Options) { o.StepsPerDoubling = 2 })
	var got []int
	for b := ix.chunk; b <= 300; b = ix.next(b) {
		got = append(got, b)
	}
	if want := []int{16, 32, 48, 64, 96, 128, 192, 256}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("boundaries %v, want %v", got, want)
	}
	tests := []struct {
		shared, want int
	}{
		{15, 0}, {16, 16}, {63, 48}, {64, 64}, {95, 64}, {150, 128}, {200, 192},
	}
	for _, tc := range tests {
		ix := newTestIndex(t, func(o *Options) { o.StepsPerDoubling = 2 })
		ix.Insert(cat(text("s", tc.shared), text("A", 250-tc.shared)), "e1")
		_, matched, _ := ix.Match(cat(text("s", tc.shared), text("B", 250-tc.shared)), []string{"e1"})
		if matched != tc.want {
			t.Errorf("shared %d: matched %d, want %d", tc.shared, matched, tc.want)
		}
	}
	eight := newTestIndex(t, func(o *Options) { o.ChunkBytes = DefaultChunkBytes; o.StepsPerDoubling = DefaultSteps })
	for _, tc := range []struct{ keyLen, want int }{{8 << 10, 32}, {256 << 10, 72}} {
		if got := len(eight.appendBoundaryHashes(nil, make([]byte, tc.keyLen))); got != tc.want {
			t.Errorf("%d-byte key: %d boundaries, want %d", tc.keyLen, got, tc.want)
		}
	}
}

func TestMatchClippedKey(t *testing.T) {
	ix := newTestIndex(t, func(o *Options) { o.MaxKeyBytes = 32 })
	ix.Insert(text("a", 100), "e1")
	ep, matched, ok := ix.Match(cat(text("a", 32), text("z", 60)), []string{"e1"})
	if ep != "e1" || matched != 32 || !ok {
		t.Fatalf("Match = (%q, %d, %v), want (e1, 32, true)", ep, matched, ok)
	}
	if got := ix.MatchRate(text("a", 100), matched); got != 1 {
		t.Errorf("MatchRate of a clipped key = %v, want 1", got)
	}
}

// TestThresholdEdges shows how the ladder's `rate >= pd_cache_threshold/100`
// comparison behaves at chunk granularity.
func TestThresholdEdges(t *testing.T) {
	shared := text("s", 32) // 2 chunks of 16
	tests := []struct {
		name      string
		queryLen  int
		threshold int // percent
		wantHit   bool
	}{
		{"exactly at threshold", 160, 20, true},  // 32/160 = 0.20
		{"just below threshold", 161, 20, false}, // 32/161 < 0.20
		{"zero threshold always hits", 10000, 0, true},
		{"full match at 100", 32, 100, true},
		{"half at 50", 64, 50, true},
		{"half below 51", 64, 51, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ix := newTestIndex(t, nil)
			ix.Insert(shared, "e1")
			q := cat(shared, text("q", tc.queryLen-len(shared)))
			_, matched, ok := ix.Match(q, []string{"e1"})
			if !ok {
				t.Fatalf("no match for %d-byte query", len(q))
			}
			hit := ix.MatchRate(q, matched)*100 >= float64(tc.threshold)
			if hit != tc.wantHit {
				t.Errorf("rate %d/%d vs %d%%: hit=%v, want %v", matched, len(q), tc.threshold, hit, tc.wantHit)
			}
		})
	}
}

func TestEvictionUnderBudget(t *testing.T) {
	const chunks = 4 // entries per 64-byte key at 16-byte chunks
	tests := []struct {
		name       string
		budgetKeys int // budget in whole keys
		insertKeys int
		wantFirst  bool // is the first key still matched?
		wantLast   bool
	}{
		{"fits", 10, 10, true, true},
		{"one over evicts the oldest", 10, 11, false, true},
		{"far over keeps the newest", 3, 50, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			budget := int64(tc.budgetKeys*chunks*entryBytes) + nameCost("e1")
			ix := newTestIndex(t, func(o *Options) { o.BudgetBytes = budget })
			for i := range tc.insertKeys {
				ix.Insert(text(fmt.Sprint("k", i), 64), "e1")
				if ix.SizeBytes() > budget {
					t.Fatalf("after %d inserts size %d > budget %d", i+1, ix.SizeBytes(), budget)
				}
			}
			_, _, first := ix.Match(text("k0", 64), []string{"e1"})
			_, _, last := ix.Match(text(fmt.Sprint("k", tc.insertKeys-1), 64), []string{"e1"})
			if first != tc.wantFirst || last != tc.wantLast {
				t.Errorf("first=%v last=%v, want %v %v (stats %+v)", first, last, tc.wantFirst, tc.wantLast, ix.Stats())
			}
			if want := min(tc.insertKeys, tc.budgetKeys) * chunks; ix.Entries() != want {
				t.Errorf("Entries = %d, want %d", ix.Entries(), want)
			}
		})
	}
}

// TestEvictionKeepsSharedPrefix: a system prompt shared by recent keys is
// refreshed by each insert, so eviction removes old tails, not the head.
func TestEvictionKeepsSharedPrefix(t *testing.T) {
	sys := text("sys", 32)
	budget := int64(12*entryBytes) + nameCost("e1")
	ix := newTestIndex(t, func(o *Options) { o.BudgetBytes = budget })
	for i := range 20 {
		ix.Insert(cat(sys, text(fmt.Sprint("u", i), 32)), "e1")
	}
	_, matched, ok := ix.Match(cat(sys, text("new", 32)), []string{"e1"})
	if !ok || matched != 32 {
		t.Fatalf("shared prefix lost: matched=%d ok=%v", matched, ok)
	}
	if _, _, ok := ix.Match(cat(sys, text("u0", 32)), []string{"e1"}); !ok {
		t.Fatal("shared prefix of an evicted key should still match")
	}
}

func TestRemoveEndpoint(t *testing.T) {
	sys := text("system", 64)
	a := cat(sys, text("alice", 40))
	b := cat(sys, text("bob", 40))
	tests := []struct {
		name        string
		inserts     []insert
		remove      string
		query       []byte
		wantEP      string
		wantMatched int
		wantDropped int
		wantEntries int
	}{
		{name: "sole owner loses all", inserts: []insert{{a, "e1"}}, remove: "e1", query: a, wantDropped: 7, wantEntries: 0},
		{name: "other owner keeps shared prefix", inserts: []insert{{a, "e1"}, {b, "e2"}}, remove: "e2", query: b, wantEP: "e1", wantMatched: 64, wantDropped: 3, wantEntries: 7},
		{name: "older owner resurfaces", inserts: []insert{{a, "e1"}, {a, "e2"}}, remove: "e2", query: a, wantEP: "e1", wantMatched: len(a), wantDropped: 0, wantEntries: 7},
		{name: "unknown endpoint is a no-op", inserts: []insert{{a, "e1"}}, remove: "e9", query: a, wantEP: "e1", wantMatched: len(a), wantDropped: 0, wantEntries: 7},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ix := newTestIndex(t, nil)
			for _, in := range tc.inserts {
				ix.Insert(in.key, in.ep)
			}
			if got := ix.RemoveEndpoint(tc.remove); got != tc.wantDropped {
				t.Errorf("RemoveEndpoint dropped %d, want %d", got, tc.wantDropped)
			}
			ep, matched, _ := ix.Match(tc.query, []string{"e1", "e2", "e9"})
			if ep != tc.wantEP || matched != tc.wantMatched {
				t.Errorf("Match = (%q, %d), want (%q, %d)", ep, matched, tc.wantEP, tc.wantMatched)
			}
			if ix.Entries() != tc.wantEntries {
				t.Errorf("Entries = %d, want %d", ix.Entries(), tc.wantEntries)
			}
		})
	}
}

func TestRemoveThenReinsertRecyclesID(t *testing.T) {
	ix := newTestIndex(t, nil)
	k := text("k", 50)
	ix.Insert(k, "e1")
	ix.RemoveEndpoint("e1")
	ix.Insert(k, "e2") // reuses e1's id
	if ep, _, ok := ix.Match(k, []string{"e1"}); ok {
		t.Fatalf("removed endpoint matched as %q", ep)
	}
	if ep, _, ok := ix.Match(k, []string{"e2"}); !ok || ep != "e2" {
		t.Fatalf("Match = %q %v, want e2", ep, ok)
	}
	if got, want := ix.SizeBytes(), int64(ix.Entries())*entryBytes+nameCost("e2"); got != want {
		t.Errorf("SizeBytes = %d, want %d", got, want)
	}
}

func TestOwnersCapped(t *testing.T) {
	ix := newTestIndex(t, nil)
	k := text("k", 16)
	for i := range maxOwners + 2 {
		ix.Insert(k, fmt.Sprint("e", i))
	}
	tests := []struct {
		cand   string
		wantOK bool
	}{
		{"e0", false}, {"e1", false}, {"e2", true}, {"e5", true},
	}
	for _, tc := range tests {
		if _, _, ok := ix.Match(k, []string{tc.cand}); ok != tc.wantOK {
			t.Errorf("Match(%s) ok=%v, want %v", tc.cand, ok, tc.wantOK)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Options)
		wantErr string
	}{
		{"defaults", func(*Options) {}, ""},
		{"tiny chunk", func(o *Options) { o.ChunkBytes = 1 }, "chunk bytes"},
		{"key below chunk", func(o *Options) { o.MaxKeyBytes = 8; o.ChunkBytes = 16 }, "max key bytes"},
		{"negative budget", func(o *Options) { o.BudgetBytes = -1 }, "negative budget"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions()
			tc.mutate(&o)
			_, err := New(o)
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("New err = %v, want containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestConcurrent exercises every method from several goroutines; run with
// -race.
func TestConcurrent(t *testing.T) {
	ix := newTestIndex(t, func(o *Options) { o.BudgetBytes = 200 * entryBytes })
	eps := []string{"e0", "e1", "e2", "e3"}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				k := cat(text("sys", 48), text(fmt.Sprint(g, "-", i%37), 40))
				ep := eps[(g+i)%len(eps)]
				switch i % 10 {
				case 0:
					ix.RemoveEndpoint(ep)
				case 1, 2, 3:
					ix.Insert(k, ep)
				default:
					if got, _, ok := ix.Match(k, eps[:2]); ok && got != "e0" && got != "e1" {
						t.Errorf("non-candidate %q", got)
						return
					}
				}
				if s := ix.Stats(); s.SizeBytes > 200*entryBytes {
					t.Errorf("size %d over budget", s.SizeBytes)
					return
				}
			}
		}()
	}
	wg.Wait()
}
