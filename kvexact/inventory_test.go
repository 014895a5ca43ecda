package kvexact

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/sirupsen/logrus"

	"github.com/infergate/infergate/internal/kvfake"
	"github.com/infergate/infergate/metrics"
)

func toks(from, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(from + i)
	}
	return out
}

func quietLogger() logrus.FieldLogger {
	l := logrus.New()
	l.SetLevel(logrus.WarnLevel)
	return l
}

func newTestInv(t testing.TB, mod func(*Options)) (*Inventory, *kvfake.Clock, *metrics.KV) {
	t.Helper()
	clk := kvfake.NewClock(time.Unix(1_800_000_000, 0))
	m := metrics.NewKV(prometheus.NewRegistry())
	o := DefaultOptions("r1")
	o.Clock, o.Metrics, o.Logger, o.Warmup = clk, m, quietLogger(), 5*time.Second
	if mod != nil {
		mod(&o)
	}
	return NewInventory(o), clk, m
}

// stored builds a BlockStored of the blocks [first, first+n) of a prompt
// whose token i is 1000+i; engine hashes are 500+block index (+salt) and the
// parent is the previous block's engine hash.
func stored(first, n int, salt uint64, medium Medium) Event {
	e := Event{Kind: EventBlockStored, BlockSize: 16, Medium: medium, TokenIDs: toks(1000+first*16, n*16)}
	for i := 0; i < n; i++ {
		e.BlockHashes = append(e.BlockHashes, salt+500+uint64(first+i))
	}
	if first > 0 {
		e.ParentHash, e.HasParent = salt+500+uint64(first-1), true
	}
	return e
}

func removed(medium Medium, salt uint64, blocks ...int) Event {
	e := Event{Kind: EventBlockRemoved, Medium: medium}
	for _, b := range blocks {
		e.BlockHashes = append(e.BlockHashes, salt+500+uint64(b))
	}
	return e
}

func batchOf(evs ...Event) Batch { return Batch{Events: evs} }

var prompt = KeysForTokens(toks(1000, 8*16), 16) // 8 blocks

func TestInventoryScore(t *testing.T) {
	type step struct {
		ep     string
		rank   int
		events []Event
	}
	tests := []struct {
		name  string
		steps []step
		want  map[string]Score // candidate → score (Endpoint filled in)
	}{
		{"empty", nil, map[string]Score{"a": {}, "b": {}}},
		{"one endpoint holds 4", []step{{"a", 0, []Event{stored(0, 4, 0, MediumGPU)}}},
			map[string]Score{"a": {Blocks: 4, GPUBlocks: 4}, "b": {}}},
		{"chained second event", []step{{"a", 0, []Event{stored(0, 2, 0, MediumGPU), stored(2, 3, 0, MediumGPU)}}},
			map[string]Score{"a": {Blocks: 5, GPUBlocks: 5}}},
		{"unanchored parent skipped", []step{{"a", 0, []Event{stored(2, 3, 0, MediumGPU)}}},
			map[string]Score{"a": {}}},
		{"hole stops the prefix", []step{{"a", 0, []Event{stored(0, 6, 0, MediumGPU), removed(MediumGPU, 0, 2)}}},
			map[string]Score{"a": {Blocks: 2, GPUBlocks: 2}}},
		{"cpu copy survives gpu removal", []step{{"a", 0, []Event{
			stored(0, 3, 0, MediumGPU),
			{Kind: EventBlockStored, BlockSize: 16, Medium: MediumCPU, BlockHashes: []uint64{500, 501, 502}},
			removed(MediumGPU, 0, 1, 2)}}},
			map[string]Score{"a": {Blocks: 3, GPUBlocks: 1, CPUBlocks: 2}}},
		{"ranks union, own keys ignore engine seeds", []step{
			{"a", 0, []Event{stored(0, 2, 0, MediumGPU)}},
			{"a", 1, []Event{stored(0, 2, 7777, MediumGPU), stored(2, 2, 7777, MediumGPU)}},
			{"b", 0, []Event{stored(0, 1, 99, MediumGPU)}}},
			map[string]Score{"a": {Blocks: 4, GPUBlocks: 4, Rank: 1}, "b": {Blocks: 1, GPUBlocks: 1}, "c": {}}},
		{"rank of the longest run, lowest on a tie", []step{
			{"a", 0, []Event{stored(0, 1, 0, MediumGPU)}},
			{"a", 2, []Event{stored(0, 3, 11, MediumGPU)}},
			{"a", 3, []Event{stored(0, 3, 22, MediumGPU)}},
			{"b", 1, []Event{stored(0, 2, 33, MediumGPU)}},
			{"b", 0, []Event{stored(0, 2, 44, MediumGPU)}}},
			map[string]Score{"a": {Blocks: 3, GPUBlocks: 3, Rank: 2}, "b": {Blocks: 2, GPUBlocks: 2, Rank: 0}}},
		{"all blocks cleared", []step{{"a", 0, []Event{stored(0, 4, 0, MediumGPU), {Kind: EventAllBlocksCleared}}}},
			map[string]Score{"a": {}}},
		{"extra keys not indexed", []step{{"a", 0, []Event{func() Event { e := stored(0, 2, 0, MediumGPU); e.HasExtraKeys = true; return e }()}}},
			map[string]Score{"a": {}}},
		{"sliding window group not indexed", []step{{"a", 0, []Event{func() Event { e := stored(0, 2, 0, MediumGPU); e.SpecKind = "sliding_window"; return e }()}}},
			map[string]Score{"a": {}}},
		{"hybrid: sliding-window group removals keep full attention", []step{{"a", 0, []Event{
			func() Event {
				e := stored(0, 3, 0, MediumGPU)
				e.SpecKind, e.HasGroup = SpecKindFullAttention, true
				return e
			}(),
			func() Event {
				e := stored(0, 3, 0, MediumGPU)
				e.SpecKind, e.GroupIdx, e.HasGroup = "sliding_window", 1, true
				return e
			}(),
			func() Event { e := removed(MediumGPU, 0, 0); e.GroupIdx, e.HasGroup = 1, true; return e }(),
			func() Event { e := removed(MediumGPU, 0, 2); e.HasGroup = true; return e }()}}},
			map[string]Score{"a": {Blocks: 2, GPUBlocks: 2}}},
		{"token count mismatch", []step{{"a", 0, []Event{func() Event { e := stored(0, 2, 0, MediumGPU); e.TokenIDs = e.TokenIDs[:20]; return e }()}}},
			map[string]Score{"a": {}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv, _, _ := newTestInv(t, nil)
			seqs := map[string]uint64{}
			for _, s := range tt.steps {
				k := fmt.Sprint(s.ep, s.rank)
				if r := inv.Apply(s.ep, s.rank, seqs[k], batchOf(s.events...)); r.Gap || r.Restart || r.Err != nil {
					t.Fatalf("Apply: %+v", r)
				}
				seqs[k]++
			}
			var cands []string
			for c := range tt.want {
				cands = append(cands, c)
			}
			got := inv.Score(prompt, cands)
			for i, c := range cands {
				w := tt.want[c]
				w.Endpoint = c
				if got[i] != w {
					t.Errorf("Score[%s] = %+v, want %+v", c, got[i], w)
				}
			}
		})
	}
}

func TestInventorySequence(t *testing.T) {
	tests := []struct {
		name       string
		seqs       []uint64
		wantGap    bool
		wantRst    bool
		wantReason string
		wantBlocks int
	}{
		{"in order", []uint64{0, 1, 2}, false, false, "", 3},
		{"starts mid-stream", []uint64{41, 42}, false, false, "", 2},
		// After a reset the next store's parent is unknown: it cannot be
		// anchored, so nothing is indexed until the prefix is stored again.
		{"forward gap", []uint64{0, 1, 3}, true, false, ReasonSeqGap, 0},
		// A regression to the start of a stream (vLLM 0, others 1) is an
		// engine restarted with an empty cache whose every event we saw:
		// cleared, counted, and trusted at once. Elsewhere it warms up.
		{"restart from 0", []uint64{5, 6, 0}, false, true, "", 0},
		{"restart from 1", []uint64{5, 6, 1}, false, true, "", 0},
		{"regression mid-stream", []uint64{5, 6, 3}, false, true, ReasonRestart, 0},
		{"duplicate", []uint64{5, 5}, false, true, ReasonRestart, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv, clk, m := newTestInv(t, nil)
			if err := inv.SetConnected("a", 0, true); err != nil {
				t.Fatal(err)
			}
			clk.Advance(time.Minute)
			var last ApplyResult
			for i, s := range tt.seqs {
				last = inv.Apply("a", 0, s, batchOf(stored(i, 1, 0, MediumGPU)))
			}
			if last.Gap != tt.wantGap || last.Restart != tt.wantRst {
				t.Errorf("last result %+v, want gap=%v restart=%v", last, tt.wantGap, tt.wantRst)
			}
			ok, reason := inv.Trusted("a")
			if ok != (tt.wantReason == "") || reason != tt.wantReason {
				t.Errorf("Trusted = %v, %q; want reason %q", ok, reason, tt.wantReason)
			}
			if got := inv.Blocks("a"); got != tt.wantBlocks {
				t.Errorf("Blocks = %d, want %d", got, tt.wantBlocks)
			}
			if got := int(metricValue(t, m.Blocks.WithLabelValues("r1", "a"))); got != tt.wantBlocks {
				t.Errorf("blocks gauge = %d, want %d", got, tt.wantBlocks)
			}
			gaps := metricValue(t, m.SeqGaps.WithLabelValues("r1", "a", "0"))
			rst := metricValue(t, m.Restarts.WithLabelValues("r1", "a", "0"))
			if (gaps == 1) != tt.wantGap || (rst == 1) != tt.wantRst {
				t.Errorf("metrics gaps=%v restarts=%v", gaps, rst)
			}
			if tt.wantReason != "" {
				clk.Advance(5 * time.Second) // warm-up after the reset re-earns trust
				if ok, reason := inv.Trusted("a"); !ok {
					t.Errorf("after warm-up: Trusted = false, %q", reason)
				}
			}
		})
	}
}

func TestInventoryTrust(t *testing.T) {
	inv, clk, _ := newTestInv(t, nil)
	check := func(step string, want bool, wantReason string) {
		t.Helper()
		ok, reason := inv.Trusted("a")
		if ok != want || reason != wantReason {
			t.Errorf("%s: Trusted = %v, %q; want %v, %q", step, ok, reason, want, wantReason)
		}
	}
	check("unknown", false, ReasonUnknownEndpoint)
	must(t, inv.SetConnected("a", 0, true))
	check("just connected", false, ReasonWarmup)
	clk.Advance(4 * time.Second)
	check("in warm-up", false, ReasonWarmup)
	clk.Advance(time.Second)
	check("warm", true, "")
	must(t, inv.SetConnected("a", 1, true))
	check("second rank warming", false, ReasonWarmup)
	must(t, inv.MarkRebuilt("a", 1))
	check("second rank rebuilt by replay", true, "")
	must(t, inv.SetConnected("a", 0, false))
	check("rank 0 disconnected", false, ReasonDisconnected)
	must(t, inv.SetConnected("a", 0, true))
	check("reconnected: cleared, warm-up restarts", false, ReasonReconnect)
	clk.Advance(5 * time.Second)
	check("warm again", true, "")
	inv.RemoveEndpoint("a")
	check("removed", false, ReasonUnknownEndpoint)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestInventoryBlockSize(t *testing.T) {
	inv, _, m := newTestInv(t, func(o *Options) { o.BlockSize = 32 })
	if inv.BlockSize() != 32 {
		t.Fatalf("configured block size %d, want 32", inv.BlockSize())
	}
	inv.Apply("a", 0, 0, batchOf(stored(0, 2, 0, MediumGPU)))
	if inv.BlockSize() != 16 {
		t.Errorf("learned block size %d, want 16", inv.BlockSize())
	}
	e := Event{Kind: EventBlockStored, BlockSize: 32, TokenIDs: toks(0, 32), BlockHashes: []uint64{1}}
	inv.Apply("b", 0, 0, batchOf(e))
	if got := metricValue(t, m.BlockSizeMismatches.WithLabelValues("r1", "b")); got != 1 {
		t.Errorf("mismatches = %v, want 1", got)
	}
	if inv.Blocks("b") != 0 || inv.Blocks("a") != 2 {
		t.Errorf("blocks a=%d b=%d, want 2 and 0", inv.Blocks("a"), inv.Blocks("b"))
	}
	if got := inv.RequestKeys(toks(1000, 40)); len(got) != 2 || got[1] != prompt[1] {
		t.Errorf("RequestKeys = %v, want the first 2 prompt keys", got)
	}
	// A reused buffer is overwritten, not appended to past its length.
	if got := inv.AppendRequestKeys([]uint64{7, 7, 7}[:0], toks(1000, 40)); !slices.Equal(got, prompt[:2]) {
		t.Errorf("AppendRequestKeys = %v, want the first 2 prompt keys %v", got, prompt[:2])
	}
	if got := inv.ScoreTokens(toks(1000, 40), []string{"a"}); got[0].Blocks != 2 {
		t.Errorf("ScoreTokens = %+v, want 2 blocks", got)
	}
}

func TestInventoryBudget(t *testing.T) {
	inv, _, m := newTestInv(t, func(o *Options) { o.Budget, o.Shards = 4, 1 })
	inv.Apply("a", 0, 0, batchOf(stored(0, 6, 0, MediumGPU)))
	if inv.Len() != 4 || inv.Blocks("a") != 4 {
		t.Fatalf("Len=%d Blocks=%d, want 4/4", inv.Len(), inv.Blocks("a"))
	}
	// LRU by last store: blocks 0,1 were evicted, so the prefix is gone.
	if s := inv.Score(prompt, []string{"a"})[0]; s.Blocks != 0 {
		t.Errorf("score after evicting the prefix = %+v, want 0", s)
	}
	// Re-storing the prefix touches it and evicts the oldest (2, 3).
	inv.Apply("a", 0, 1, batchOf(stored(0, 2, 0, MediumGPU)))
	if s := inv.Score(prompt, []string{"a"})[0]; s.Blocks != 2 {
		t.Errorf("score = %+v, want 2", s)
	}
	if got := metricValue(t, m.Evictions.WithLabelValues("r1")); got != 4 {
		t.Errorf("evictions = %v, want 4", got)
	}
	// Removal of an evicted block is a no-op; removal of a live one works.
	inv.Apply("a", 0, 2, batchOf(removed(MediumGPU, 0, 2, 4)))
	if inv.Len() != 3 || inv.Blocks("a") != 3 {
		t.Errorf("Len=%d Blocks=%d, want 3/3", inv.Len(), inv.Blocks("a"))
	}
	// Another endpoint's stores of other content evict a's blocks; a's
	// gauge follows although a published nothing.
	other := Event{Kind: EventBlockStored, BlockSize: 16, TokenIDs: toks(50000, 64), BlockHashes: []uint64{1, 2, 3, 4}}
	inv.Apply("b", 0, 0, batchOf(other))
	if inv.Len() != 4 || inv.Blocks("a") >= 3 {
		t.Errorf("Len=%d a=%d, want 4 and a below its 3", inv.Len(), inv.Blocks("a"))
	}
	for _, ep := range []string{"a", "b"} {
		if got, want := metricValue(t, m.Blocks.WithLabelValues("r1", ep)), float64(inv.Blocks(ep)); got != want {
			t.Errorf("%s's gauge = %v, want %v", ep, got, want)
		}
	}

}

func TestInventorySlotLimit(t *testing.T) {
	inv, _, _ := newTestInv(t, nil)
	for i := 0; i < MaxSlots; i++ {
		if r := inv.Apply(fmt.Sprint("ep", i), 0, 0, Batch{}); r.Err != nil {
			t.Fatalf("slot %d: %v", i, r.Err)
		}
	}
	if r := inv.Apply("one-too-many", 0, 0, Batch{}); r.Err == nil {
		t.Error("65th endpoint rank must be refused")
	}
	inv.RemoveEndpoint("ep3")
	if r := inv.Apply("reuses-freed-slot", 0, 0, Batch{}); r.Err != nil {
		t.Errorf("freed slot not reused: %v", r.Err)
	}
}

// TestInventoryConcurrent runs writers (one per endpoint rank, as in
// production) against readers; meaningful under -race.
func TestInventoryConcurrent(t *testing.T) {
	inv, _, _ := newTestInv(t, func(o *Options) { o.Budget = 2000 })
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			ep := fmt.Sprint("ep", w)
			must(t, inv.SetConnected(ep, 0, true))
			for i := 0; i < 200; i++ {
				b := batchOf(stored(0, 8, uint64(w)<<32, MediumGPU), removed(MediumGPU, uint64(w)<<32, i%8))
				if i%50 == 49 {
					b.Events = append(b.Events, Event{Kind: EventAllBlocksCleared})
				}
				inv.Apply(ep, 0, uint64(i), b)
			}
		}(w)
	}
	cands := []string{"ep0", "ep1", "ep2", "ep3"}
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				for _, s := range inv.Score(prompt, cands) {
					if s.Blocks > len(prompt) || s.GPUBlocks+s.CPUBlocks != s.Blocks {
						t.Errorf("inconsistent score %+v", s)
						return
					}
				}
				inv.Trusted("ep1")
				inv.Blocks("ep2")
			}
		}()
	}
	wg.Wait()
	for _, ep := range cands {
		if got := inv.Blocks(ep); got < 0 || got > 8 {
			t.Errorf("Blocks(%s) = %d, want 0..8", ep, got)
		}
	}
}

// metricValue reads a gauge or counter (testutil would add a module).
func metricValue(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}

// TrustedMask must agree with Trusted for every candidate, in order, and
// leave candidates past the 64th (which it cannot represent) unset.
func TestInventoryTrustedMask(t *testing.T) {
	inv, clk, _ := newTestInv(t, nil)
	must(t, inv.SetConnected("old", 0, true))
	must(t, inv.SetConnected("two-ranks", 0, true))
	must(t, inv.SetConnected("two-ranks", 1, true))
	clk.Advance(time.Minute)
	must(t, inv.SetConnected("two-ranks-half", 0, true)) // one rank warm, one not
	clk.Advance(time.Minute)
	must(t, inv.SetConnected("two-ranks-half", 1, true))
	must(t, inv.SetConnected("new", 0, true)) // in warm-up
	tests := []struct {
		name string
		eps  []string
		want uint64
	}{
		{"none", nil, 0},
		{"trusted and not", []string{"old", "new", "unknown", "two-ranks", "two-ranks-half"}, 0b01001},
		{"repeated", []string{"new", "old", "old"}, 0b110},
		{"past 64", append(make([]string, 64), "old"), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := inv.TrustedMask(tt.eps)
			if got != tt.want {
				t.Errorf("TrustedMask = %b, want %b", got, tt.want)
			}
			for i, ep := range tt.eps[:min(len(tt.eps), 64)] {
				if ok, _ := inv.Trusted(ep); ok != (got&(1<<i) != 0) {
					t.Errorf("candidate %d %q: Trusted = %v, mask bit %v", i, ep, ok, got&(1<<i) != 0)
				}
			}
		})
	}
}
