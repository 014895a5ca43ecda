package ladder

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/infergate/infergate/datapath/pick"
	"github.com/infergate/infergate/kvexact"
	"github.com/infergate/infergate/kvexact/tokenize"
	"github.com/infergate/infergate/metrics"
)

// fakeIndex scores by a fixed table: one request key per 4 tokens.
type fakeIndex struct {
	scores  map[string]kvexact.Score
	trusted map[string]string // endpoint → untrust reason ("" trusted); absent: unknown
}

func (f *fakeIndex) AppendRequestKeys(dst []uint64, tokens []uint32) []uint64 {
	return append(dst, make([]uint64, len(tokens)/4)...)
}

func (f *fakeIndex) Score(keys []uint64, cands []string) []kvexact.Score {
	out := make([]kvexact.Score, len(cands))
	for i, c := range cands {
		s := f.scores[c]
		s.Endpoint = c
		out[i] = s
	}
	return out
}

func (f *fakeIndex) Trusted(ep string) (bool, string) {
	why, ok := f.trusted[ep]
	if !ok {
		return false, kvexact.ReasonUnknownEndpoint
	}
	return why == "", why
}

func (f *fakeIndex) TrustedMask(eps []string) uint64 {
	var m uint64
	for i, ep := range eps[:min(len(eps), 64)] {
		if ok, _ := f.Trusted(ep); ok {
			m |= 1 << i
		}
	}
	return m
}

type fixedTokenizer struct {
	ids []uint32
	err error
}

func (f fixedTokenizer) Tokens(context.Context, tokenize.Request) ([]uint32, error) {
	return f.ids, f.err
}

// chosenID is the endpoint a pick chose, "" for a fall-through.
func chosenID(cands []Candidate, idx int, ok bool) string {
	if !ok {
		return ""
	}
	return cands[idx].ID
}

func gpu(n int) kvexact.Score      { return kvexact.Score{Blocks: n, GPUBlocks: n} }
func cpu(n int) kvexact.Score      { return kvexact.Score{Blocks: n, CPUBlocks: n} }
func mixed(g, c int) kvexact.Score { return kvexact.Score{Blocks: g + c, GPUBlocks: g, CPUBlocks: c} }

func TestKVExactPick(t *testing.T) {
	all := map[string]string{"a": "", "b": "", "c": ""}
	tokens16 := make([]uint32, 16) // 4 blocks
	tests := []struct {
		name       string
		scores     map[string]kvexact.Score
		trusted    map[string]string
		loads      [3]int
		guard      int
		tok        tokenize.Tokenizer
		factTokens []uint32
		want       string // endpoint, or "" for a fall-through
		wantReason string
	}{
		{"longest prefix wins", map[string]kvexact.Score{"a": gpu(1), "b": gpu(3), "c": gpu(2)}, all, [3]int{}, 3, nil, tokens16, "b", ""},
		{"gpu beats cpu of equal length", map[string]kvexact.Score{"a": cpu(3), "b": gpu(3)}, all, [3]int{}, 3, nil, tokens16, "b", ""},
		{"cpu blocks still count", map[string]kvexact.Score{"a": cpu(3), "b": gpu(2)}, all, [3]int{}, 3, nil, tokens16, "a", ""},
		{"mixed weighs cpu 0.8", map[string]kvexact.Score{"a": mixed(1, 2), "b": gpu(2)}, all, [3]int{}, 3, nil, tokens16, "a", ""},
		{"tie goes to lower load", map[string]kvexact.Score{"a": gpu(2), "b": gpu(2)}, all, [3]int{2, 1, 0}, 3, nil, tokens16, "b", ""},
		{"tie at equal load: first", map[string]kvexact.Score{"a": gpu(2), "b": gpu(2)}, all, [3]int{1, 1, 0}, 3, nil, tokens16, "a", ""},
		{"load guard skips to next holder", map[string]kvexact.Score{"a": gpu(4), "b": gpu(1)}, all, [3]int{5, 1, 0}, 3, nil, tokens16, "b", ""},
		{"load guard at threshold keeps winner", map[string]kvexact.Score{"a": gpu(4), "b": gpu(1)}, all, [3]int{3, 1, 0}, 3, nil, tokens16, "a", ""},
		{"load guard on every holder", map[string]kvexact.Score{"a": gpu(4)}, all, [3]int{9, 1, 0}, 3, nil, tokens16, "", ReasonLoadGuard},
		{"load guard disabled", map[string]kvexact.Score{"a": gpu(4)}, all, [3]int{9, 1, 0}, -1, nil, tokens16, "a", ""},
		{"untrusted holder does not count", map[string]kvexact.Score{"a": gpu(4), "b": gpu(1)}, map[string]string{"a": kvexact.ReasonWarmup, "b": "", "c": ""}, [3]int{}, 3, nil, tokens16, "b", ""},
		{"nothing trusted", map[string]kvexact.Score{"a": gpu(4)}, map[string]string{"a": kvexact.ReasonWarmup}, [3]int{}, 3, nil, tokens16, "", ReasonUntrusted},
		{"zero blocks is a miss", map[string]kvexact.Score{}, all, [3]int{}, 3, nil, tokens16, "", ReasonMiss},
		{"prompt below one block", map[string]kvexact.Score{"a": gpu(1)}, all, [3]int{}, 3, nil, make([]uint32, 3), "", ReasonShortPrompt},
		{"tokenizer used without ids", map[string]kvexact.Score{"c": gpu(1)}, all, [3]int{}, 3, fixedTokenizer{ids: tokens16}, nil, "c", ""},
		{"tokenizer failure falls through", map[string]kvexact.Score{"c": gpu(1)}, all, [3]int{}, 3, fixedTokenizer{err: errors.New("boom")}, nil, "", ReasonTokenize},
		{"tokenizer timeout falls through", map[string]kvexact.Score{"c": gpu(1)}, all, [3]int{}, 3, fixedTokenizer{err: context.DeadlineExceeded}, nil, "", ReasonTokenize},
		{"no prompt", map[string]kvexact.Score{"c": gpu(1)}, all, [3]int{}, 3, fixedTokenizer{err: tokenize.ErrNoPrompt}, nil, "", ReasonNoPrompt},
		{"no tokenizer, no ids", map[string]kvexact.Score{"c": gpu(1)}, all, [3]int{}, 3, nil, nil, "", ReasonNoPrompt},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := metrics.NewKVRouting(prometheus.NewRegistry())
			tier := NewKVExact(KVExactOptions{Rule: "r", Index: &fakeIndex{scores: tc.scores, trusted: tc.trusted},
				Tokenizer: tc.tok, LoadGuard: tc.guard, Metrics: m})
			cands := []Candidate{{ID: "a", Load: tc.loads[0]}, {ID: "b", Index: 1, Load: tc.loads[1]}, {ID: "c", Index: 2, Load: tc.loads[2]}}
			f := &Facts{Ctx: context.Background(), Tokens: tc.factTokens}
			idx, reason, ok := tier.Pick(f, cands)
			got := chosenID(cands, idx, ok)
			if got != tc.want || reason != tc.wantReason {
				t.Fatalf("pick = %q reason %q, want %q reason %q", got, reason, tc.want, tc.wantReason)
			}
			if ok {
				if v := cval(m.Tier15Hits.WithLabelValues("r")); v != 1 {
					t.Fatalf("hits = %v", v)
				}
			} else if v := cval(m.Tier15Misses.WithLabelValues("r", tc.wantReason)); v != 1 {
				t.Fatalf("misses{%s} = %v", tc.wantReason, v)
			}
			// Explain agrees and counts nothing more.
			eidx, ereason, eok, scores := tier.Explain(f, cands)
			if eidx != idx || ereason != reason || eok != ok {
				t.Fatalf("explain = %d %q %v, pick = %d %q %v", eidx, ereason, eok, idx, reason, ok)
			}
			if ok && len(scores) != len(cands) {
				t.Fatalf("explain scores = %v", scores)
			}
			if didx, dreason, dok := tier.DryPick(f, cands); didx != idx || dreason != reason || dok != ok {
				t.Fatalf("dry pick = %d %q %v, pick = %d %q %v", didx, dreason, dok, idx, reason, ok)
			}
			if v := cval(m.Tier15Hits.WithLabelValues("r")) + cval(m.Tier15Misses.WithLabelValues("r", reason)); v != 1 {
				t.Fatalf("explain counted: %v", v)
			}
		})
	}
}

func TestWatchdog(t *testing.T) {
	var last atomic.Int64
	now := time.Unix(1000, 0)
	flowing := EventsFlowing(&last, time.Minute, func() time.Time { return now })
	w := NewWatchdog(3, flowing)
	steps := []struct {
		hit       bool
		lastEvent time.Time // zero: never
		fires     bool
	}{
		{false, time.Time{}, false},               // no events yet: not counted
		{false, time.Time{}, false},               // still none
		{false, now.Add(-2 * time.Minute), false}, // events stale: not counted
		{false, now, false},                       // 1
		{false, now, false},                       // 2
		{false, now, true},                        // 3: fires
		{false, now, false},                       // 4: once per streak
		{true, now, false},                        // hit re-arms
		{false, now, false},                       // 1
		{false, now, false},                       // 2
		{false, now, true},                        // 3: fires again
	}
	for i, s := range steps {
		if s.lastEvent.IsZero() {
			last.Store(0)
		} else {
			last.Store(s.lastEvent.UnixNano())
		}
		if got := w.Observe(s.hit); got != s.fires {
			t.Fatalf("step %d: fired = %v, want %v", i, got, s.fires)
		}
	}
}

func TestKVExactWatchdogCounts(t *testing.T) {
	m := metrics.NewKVRouting(prometheus.NewRegistry())
	idx := &fakeIndex{scores: map[string]kvexact.Score{}, trusted: map[string]string{"a": ""}}
	tier := NewKVExact(KVExactOptions{Rule: "r", Index: idx, Watchdog: NewWatchdog(5, nil), Metrics: m})
	cands := []Candidate{{ID: "a"}}
	f := &Facts{Tokens: make([]uint32, 8)}
	for i := 0; i < 12; i++ {
		tier.Explain(f, cands) // explanations and dry runs never feed the watchdog
		tier.DryPick(f, cands)
		tier.Pick(f, cands)
	}
	if v := cval(m.ZeroHitWatchdog.WithLabelValues("r")); v != 1 {
		t.Fatalf("watchdog fired %v times in 12 zero-hit lookups with N=5, want 1", v)
	}
	idx.scores["a"] = gpu(1)
	tier.Pick(f, cands)
	idx.scores["a"] = kvexact.Score{}
	for i := 0; i < 5; i++ {
		tier.Pick(f, cands)
	}
	if v := cval(m.ZeroHitWatchdog.WithLabelValues("r")); v != 2 {
		t.Fatalf("watchdog = %v after re-arm, want 2", v)
	}
}

// TestKVExactRealInventory runs the tier over a real inventory fed by
// synthetic events, trusted through replay.
func TestKVExactRealInventory(t *testing.T) {
	inv, tokens := seededInventory(t, 3)
	tier := NewKVExact(KVExactOptions{Rule: "r", Index: inv, LoadGuard: 3})
	cands := []Candidate{{ID: "ep0"}, {ID: "ep1", Index: 1}, {ID: "ep2", Index: 2}}
	idx, reason, ok := tier.Pick(&Facts{Tokens: tokens}, cands)
	if !ok || cands[idx].ID != "ep2" {
		t.Fatalf("pick = %d %q %v, want ep2 (holds the most blocks)", idx, reason, ok)
	}
}

// seededInventory stores, for endpoint epN, the first N+1 blocks of one
// 64-token prompt (block size 16) and marks every endpoint trusted.
func seededInventory(tb testing.TB, n int) (*kvexact.Inventory, []uint32) {
	tb.Helper()
	inv := kvexact.NewInventory(kvexact.Options{Rule: "r", BlockSize: 16})
	tokens := make([]uint32, 64)
	for i := range tokens {
		tokens[i] = uint32(i * 7)
	}
	for e := 0; e < n; e++ {
		ep := fmt.Sprintf("ep%d", e)
		blocks := e + 1
		ev := kvexact.Event{Kind: kvexact.EventBlockStored, BlockSize: 16, TokenIDs: tokens[:blocks*16]}
		for b := 0; b < blocks; b++ {
			ev.BlockHashes = append(ev.BlockHashes, uint64(1000*e+b+1))
		}
		inv.Apply(ep, 0, 0, kvexact.Batch{Events: []kvexact.Event{ev}})
		if err := inv.SetConnected(ep, 0, true); err != nil {
			tb.Fatal(err)
		}
		if err := inv.MarkRebuilt(ep, 0); err != nil {
			tb.Fatal(err)
		}
	}
	return inv, tokens
}

func cval(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// cachedTokenizer returns fixed ids: the cost of a cache hit without HTTP.
type cachedTokenizer struct{ ids []uint32 }

func (c cachedTokenizer) Tokens(context.Context, tokenize.Request) ([]uint32, error) {
	return c.ids, nil
}

// BenchmarkKVExactPick is the Tier 1.5 decision with a cached tokenisation
// over a real inventory (4 candidates, 64-token prompt), against the
// least-loaded baseline Tier 2 runs anyway.
func BenchmarkKVExactPick(b *testing.B) {
	inv, tokens := seededInventory(b, 4)
	cands := []Candidate{{ID: "ep0", Load: 1}, {ID: "ep1", Index: 1, Load: 2}, {ID: "ep2", Index: 2}, {ID: "ep3", Index: 3, Load: 1}}
	f := &Facts{Ctx: context.Background()}
	b.Run("baseline_least_loaded", func(b *testing.B) {
		var rr atomic.Uint64
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			pick.LeastLoaded(cands, &rr)
		}
	})
	b.Run("kvexact_cached_tokens", func(b *testing.B) {
		tier := NewKVExact(KVExactOptions{Rule: "r", Index: inv, Tokenizer: cachedTokenizer{tokens}, LoadGuard: 3,
			Metrics: metrics.NewKVRouting(prometheus.NewRegistry())})
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, _, ok := tier.Pick(f, cands); !ok {
				b.Fatal("miss")
			}
		}
	})
	// The same with a pending table holding this prompt on one endpoint:
	// the read path every decision pays (a binary search per candidate).
	b.Run("kvexact_cached_tokens_pending", func(b *testing.B) {
		pending := kvexact.NewPending(time.Hour)
		pending.Note("ep2", inv.RequestKeys(tokens), time.Now())
		tier := NewKVExact(KVExactOptions{Rule: "r", Index: inv, Tokenizer: cachedTokenizer{tokens}, LoadGuard: 3,
			Pending: pending, Metrics: metrics.NewKVRouting(prometheus.NewRegistry())})
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, _, ok := tier.Pick(f, cands); !ok {
				b.Fatal("miss")
			}
		}
	})
	// The engine tokenizer on a cache hit: the body is parsed for its
	// prompt and hashed, no HTTP.
	b.Run("kvexact_engine_tokenizer_cache_hit", func(b *testing.B) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_ = json.NewEncoder(w).Encode(map[string]any{"tokens": tokens, "count": len(tokens)})
		}))
		defer srv.Close()
		tok, err := tokenize.NewEngine(tokenize.Options{Rule: "r", Endpoints: func() []string { return []string{strings.TrimPrefix(srv.URL, "http://")} }})
		if err != nil {
			b.Fatal(err)
		}
		defer tok.Close()
		tier := NewKVExact(KVExactOptions{Rule: "r", Index: inv, Tokenizer: tok, LoadGuard: 3,
			Metrics: metrics.NewKVRouting(prometheus.NewRegistry())})
		body := []byte(`{"model":"m","max_tokens":16,"stream":true,"prompt":"` + strings.Repeat("lorem ipsum dolor ", 60) + `"}`)
		ef := &Facts{Ctx: context.Background(), Path: "/v1/completions", Model: "m", Body: body}
		if _, _, ok := tier.Pick(ef, cands); !ok {
			b.Fatal("miss")
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, _, ok := tier.Pick(ef, cands); !ok {
				b.Fatal("miss")
			}
		}
	})
}

// TestTracePrefillRank: the trace carries the DP rank on which the chosen
// prefill holds the prompt's blocks, and no rank when it holds none.
func TestTracePrefillRank(t *testing.T) {
	tokens16 := make([]uint32, 16)
	tests := []struct {
		name     string
		scores   map[string]kvexact.Score
		wantID   string
		wantRank int
		wantHas  bool
	}{
		{"holder on rank 3", map[string]kvexact.Score{"a": {Blocks: 2, GPUBlocks: 2, Rank: 3}}, "a", 3, true},
		{"holder on rank 0", map[string]kvexact.Score{"b": {Blocks: 1, GPUBlocks: 1}}, "b", 0, true},
		{"nobody holds it", nil, "a", 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			idx := &fakeIndex{scores: tc.scores, trusted: map[string]string{"a": "", "b": ""}}
			l := New(nil, NewKVExact(KVExactOptions{Rule: "r", Index: idx, LoadGuard: -1}))
			f := Facts{Tokens: tokens16, Now: time.Now()}
			tr, ok := l.SelectPair(&f, []Candidate{{ID: "a", Index: 0}, {ID: "b", Index: 1}}, []Candidate{{ID: "d", Index: 2}})
			if !ok || tr.Prefill.ID != tc.wantID || tr.PrefillRank != tc.wantRank || tr.HasPrefillRank != tc.wantHas {
				t.Fatalf("trace prefill %s rank %d (%v), want %s rank %d (%v)", tr.Prefill.ID, tr.PrefillRank, tr.HasPrefillRank, tc.wantID, tc.wantRank, tc.wantHas)
			}
		})
	}
}

// chainIndex is fakeIndex with keys that name their prompt: block i of a
// prompt whose first token is g has key g<<32 | i+1, so two prompts of
// one group share their keys and two groups share none.
type chainIndex struct{ fakeIndex }

func (c *chainIndex) AppendRequestKeys(dst []uint64, tokens []uint32) []uint64 {
	for i := 0; i+4 <= len(tokens); i += 4 {
		dst = append(dst, uint64(tokens[0])<<32|uint64(i/4+1))
	}
	return dst
}

func groupPrompt(g uint32, blocks int) []uint32 {
	ids := make([]uint32, 4*blocks)
	ids[0] = g
	return ids
}

// TestKVExactPending: a prompt just placed on an endpoint counts as held
// there until its events could have arrived, so the group's next request
// follows it instead of being placed again as a miss; only the placed
// prefix counts, only for the TTL, only on a trusted endpoint, and a
// placement the inventory already shows is not noted.
func TestKVExactPending(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const ttl = 2 * time.Second
	all := map[string]string{"a": "", "b": "", "c": ""}
	cost := &pick.CostModel{PerToken: 10 * time.Millisecond, Overhead: -1, PerRequest: 100 * time.Millisecond, Window: 2, BatchSlowdown: -1}
	type placed struct {
		ep     string
		group  uint32
		blocks int
		at     time.Duration
	}
	for _, tc := range []struct {
		name       string
		off        bool // no Pending table
		scores     map[string]kvexact.Score
		trusted    map[string]string
		placements []placed
		group      uint32
		blocks     int
		at         time.Duration
		want       string
		wantReason string
		wantNoted  int // keys in the table after the placements
	}{
		{"placed, not yet published: follows the placement", false, nil, all,
			[]placed{{"b", 7, 16, 0}}, 7, 16, 500 * time.Millisecond, "b", "", 16},
		{"the same without the table: a miss", true, nil, all,
			[]placed{{"b", 7, 16, 0}}, 7, 16, 500 * time.Millisecond, "", ReasonMiss, 0},
		{"after the TTL: a miss", false, nil, all,
			[]placed{{"b", 7, 16, 0}}, 7, 16, ttl, "", ReasonMiss, 16},
		{"another group: a miss", false, nil, all,
			[]placed{{"b", 7, 16, 0}}, 8, 16, 500 * time.Millisecond, "", ReasonMiss, 16},
		{"a longer prompt of the group: the placed prefix", false, nil, all,
			[]placed{{"b", 7, 8, 0}}, 7, 16, 500 * time.Millisecond, "b", "", 8},
		{"an untrusted endpoint's placement does not count", false, nil, map[string]string{"a": "", "b": kvexact.ReasonStale, "c": ""},
			[]placed{{"b", 7, 16, 0}}, 7, 16, 500 * time.Millisecond, "", ReasonMiss, 16},
		{"a published holder with more blocks wins", false, map[string]kvexact.Score{"a": gpu(16)}, all,
			[]placed{{"b", 7, 8, 0}}, 7, 16, 500 * time.Millisecond, "a", "", 8},
		{"a placement the inventory shows is not noted", false, map[string]kvexact.Score{"b": gpu(16)}, all,
			[]placed{{"b", 7, 16, 0}}, 7, 16, 500 * time.Millisecond, "b", "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pending *kvexact.Pending
			if !tc.off {
				pending = kvexact.NewPending(ttl)
			}
			m := metrics.NewKVRouting(prometheus.NewRegistry())
			tier := NewKVExact(KVExactOptions{Rule: "r", Index: &chainIndex{fakeIndex{scores: tc.scores, trusted: tc.trusted}},
				LoadGuard: 3, Cost: cost, Pending: pending, Metrics: m})
			cands := []Candidate{{ID: "a"}, {ID: "b", Index: 1}, {ID: "c", Index: 2}}
			for _, p := range tc.placements {
				f := &Facts{Ctx: context.Background(), Tokens: groupPrompt(p.group, p.blocks), Now: t0.Add(p.at)}
				tier.Pick(f, cands) // scores the request: f.KVHeld, as the ladder does before Observe
				tier.Observe(f, Candidate{ID: p.ep})
			}
			if pending != nil {
				if n := pending.Len(); n != tc.wantNoted {
					t.Errorf("noted keys = %d, want %d", n, tc.wantNoted)
				}
			}
			f := &Facts{Ctx: context.Background(), Tokens: groupPrompt(tc.group, tc.blocks), Now: t0.Add(tc.at)}
			idx, reason, ok := tier.Pick(f, cands)
			got := chosenID(cands, idx, ok)
			if got != tc.want || reason != tc.wantReason {
				t.Fatalf("pick = %q reason %q, want %q reason %q", got, reason, tc.want, tc.wantReason)
			}
			wantPending := 0.0
			if got != "" && tc.scores[got].Blocks == 0 {
				wantPending = 1
			}
			if v := cval(m.Tier15Pending.WithLabelValues("r")); v != wantPending {
				t.Errorf("pending hits = %v, want %v", v, wantPending)
			}
			_, _, _, scores := tier.Explain(f, cands)
			for _, s := range scores {
				if s.ID == tc.want && tc.scores[s.ID].Blocks == 0 && s.PendingBlocks == 0 {
					t.Errorf("explain shows no pending blocks on %s: %+v", s.ID, s)
				}
			}
		})
	}
}

// TestKVExactPendingConcurrent runs placements and picks on one tier from
// many goroutines, as the ladder does (run with -race): the tier's pending
// table, scratch pool and metrics are shared. Each goroutine places groups
// of its own, so every group's next request must follow its placement
// through the table however the goroutines interleave.
func TestKVExactPendingConcurrent(t *testing.T) {
	const (
		workers = 8
		rounds  = 100 // per worker: 8 × 100 × 16 keys stay under MaxPendingKeys
		blocks  = 16
	)
	t0 := time.Unix(1000, 0)
	all := map[string]string{"a": "", "b": "", "c": ""}
	m := metrics.NewKVRouting(prometheus.NewRegistry())
	tier := NewKVExact(KVExactOptions{Rule: "r", Index: &chainIndex{fakeIndex{trusted: all}}, LoadGuard: 3,
		Pending: kvexact.NewPending(time.Hour), Metrics: m})
	start := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cands := []Candidate{{ID: "a"}, {ID: "b", Index: 1}, {ID: "c", Index: 2}}
			<-start
			for r := range rounds {
				group := uint32(1 + w*rounds + r)
				placed := cands[(w+r)%len(cands)]
				f := &Facts{Ctx: context.Background(), Tokens: groupPrompt(group, blocks), Now: t0}
				if _, reason, ok := tier.Pick(f, cands); ok || reason != ReasonMiss {
					t.Errorf("group %d's first request: ok %v reason %q, want a miss", group, ok, reason)
					return
				}
				tier.Observe(f, placed)
				f = &Facts{Ctx: context.Background(), Tokens: groupPrompt(group, blocks), Now: t0.Add(time.Second)}
				idx, reason, ok := tier.Pick(f, cands)
				if got := chosenID(cands, idx, ok); got != placed.ID || !f.KVPending {
					t.Errorf("group %d's repeat: %q (reason %q, pending %v), want %s, where it was placed",
						group, got, reason, f.KVPending, placed.ID)
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	if got := cval(m.Tier15Pending.WithLabelValues("r")); got != workers*rounds {
		t.Errorf("pending hits = %v, want %d", got, workers*rounds)
	}
}
