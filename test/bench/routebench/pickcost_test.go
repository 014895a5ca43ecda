package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/infergate/infergate/datapath/ladder"
	dppick "github.com/infergate/infergate/datapath/pick"
	"github.com/infergate/infergate/kvexact"
	"github.com/infergate/infergate/kvexact/tokenize"
	"github.com/infergate/infergate/test/bench/proccpu"
	"github.com/infergate/infergate/test/enginesim"
)

// pickTokenizer is the bench's tokenizer, relative to this package.
const pickTokenizer = "../../../kvexact/bpe/testdata/qwen3"

// pickText is the bench's prompt text generator on the gateway's tokenizer.
func pickText(b *testing.B) *textGen {
	b.Helper()
	tok, _, err := enginesim.LoadTokenizer(pickTokenizer)
	if err != nil {
		b.Fatal(err)
	}
	text, err := newTextGen(tok)
	if err != nil {
		b.Fatal(err)
	}
	return text
}

// BenchmarkRoutePick is the routing work per request of the bench's kv arm
// against its rr arm on the same candidates and the bench's own
// shared-prefix requests (32 groups × 5 prompts, 2,000-token system prompt
// + 200-token question, completions bodies): the KV-exact tier in-process
// tokenises the body (with the tokenizer's segment cache warm, as in a
// run), hashes its blocks and scores 8 engines whose inventory holds the
// groups' system prompts and prices each with the cost model, against a
// least-loaded pick (the legacy guard's fallback) and a round-robin
// cursor. A CPU-time figure that, unlike the gateway's /proc CPU in a run,
// does not depend on what else the box runs:
// the gateway's extra CPU per request on kv is about the kv row minus the
// rr row.
func BenchmarkRoutePick(b *testing.B) {
	text := pickText(b)
	sp := sharedPrefix{Groups: 32, Prompts: 5, System: 2000, Question: 200, Output: 100}
	prompts := sp.build(text, 1)
	local := tokenize.NewLocal(tokenize.LocalOptions{Models: map[string]string{tokenize.AnyModel: pickTokenizer}})
	const engines = 8
	inv := kvexact.NewInventory(kvexact.Options{Rule: "bench-kv", BlockSize: 16})
	type req struct{ body []byte }
	var reqs []req
	for g, group := range prompts.prompts {
		for _, p := range group {
			body, _ := json.Marshal(map[string]any{"model": "sim-8b", "prompt": p, "max_tokens": sp.Output, "stream": true,
				"stream_options": map[string]any{"include_usage": true}})
			reqs = append(reqs, req{body})
		}
		// Engine g%8 holds the group's system prompt, as after a warm-up.
		ids, err := local.Tokens(context.Background(), tokenize.Request{Path: pathCompletions, Body: reqs[len(reqs)-1].body})
		if err != nil {
			b.Fatal(err)
		}
		full := sp.System / 16 * 16
		ev := kvexact.Event{Kind: kvexact.EventBlockStored, BlockSize: 16, TokenIDs: ids[:full]}
		for k := range full / 16 {
			ev.BlockHashes = append(ev.BlockHashes, uint64(g)<<32|uint64(k+1))
		}
		inv.Apply(fmt.Sprintf("e%d", g%engines), 0, uint64(g/engines), kvexact.Batch{Events: []kvexact.Event{ev}})
	}
	cands := make([]dppick.Candidate, engines)
	for i := range cands {
		cands[i] = dppick.Candidate{ID: fmt.Sprintf("e%d", i), Index: i, Load: i % 3}
		if err := inv.SetConnected(cands[i].ID, 0, true); err != nil {
			b.Fatal(err)
		}
		if err := inv.MarkRebuilt(cands[i].ID, 0); err != nil {
			b.Fatal(err)
		}
	}
	tier := ladder.NewKVExact(ladder.KVExactOptions{Rule: "bench-kv", Index: inv, Tokenizer: local, LoadGuard: 3, Costs: pickCosts()})
	kvPick := func(i int) bool {
		f := &dppick.Facts{Ctx: context.Background(), Path: pathCompletions, Model: "sim-8b", Body: reqs[i%len(reqs)].body}
		_, _, ok := tier.Pick(f, cands)
		return ok
	}
	for i := range 2 * len(reqs) { // each prompt twice: its segment is cached from then on
		if !kvPick(i) {
			b.Fatalf("request %d: the KV tier fell through with every group's prompt held", i)
		}
	}
	b.Run("rr", func(b *testing.B) {
		var cursor atomic.Uint64
		defer reportCPU(b)()
		for b.Loop() {
			_ = cands[cursor.Add(1)%engines]
		}
	})
	b.Run("least_loaded", func(b *testing.B) {
		var cursor atomic.Uint64
		defer reportCPU(b)()
		for b.Loop() {
			dppick.LeastLoaded(cands, &cursor)
		}
	})
	b.Run("kv", func(b *testing.B) {
		b.ReportAllocs()
		defer reportCPU(b)()
		i := 0
		for b.Loop() {
			if !kvPick(i) {
				b.Fatal("fell through")
			}
			i++
		}
	})
}

// BenchmarkRoutePickChat is the kv arm's routing work on the multi-turn
// workload's requests (chat bodies, 3 turns resending the history, each
// conversation with a system prompt of its own): a conversation's first
// turn meets its system prompt for the first time and its second turn
// again (the tokenizer caches a segment on its second sighting), so unlike
// the shared-prefix requests most turns tokenise text afresh. No engine
// holds the conversations (every pick falls through), which costs the
// tier the same tokenising and hashing as a hit.
func BenchmarkRoutePickChat(b *testing.B) {
	text := pickText(b)
	local := tokenize.NewLocal(tokenize.LocalOptions{Models: map[string]string{tokenize.AnyModel: pickTokenizer}})
	inv := kvexact.NewInventory(kvexact.Options{Rule: "bench-kv", BlockSize: 16})
	cands := make([]dppick.Candidate, 8)
	for i := range cands {
		cands[i] = dppick.Candidate{ID: fmt.Sprintf("e%d", i), Index: i, Load: i % 3}
	}
	tier := ladder.NewKVExact(ladder.KVExactOptions{Rule: "bench-kv", Index: inv, Tokenizer: local, LoadGuard: 3, Costs: pickCosts()})
	mt := multiTurn{Turns: 3, System: 1500, User: 200, Output: 100}
	// bodies returns the first n turns of fresh conversations, in the
	// order a conversation sends them.
	conv := uint64(0)
	bodies := func(n int) [][]byte {
		var out [][]byte
		for len(out) < n {
			conv++
			history := []map[string]string{{"role": "system", "content": text.text(seeded(7, conv), mt.System)}}
			for t := range mt.Turns {
				history = append(history, map[string]string{"role": "user", "content": text.text(seeded(8, conv*100+uint64(t)), mt.User)})
				body, _ := json.Marshal(map[string]any{"model": "sim-8b", "messages": history, "max_tokens": mt.Output, "stream": true})
				out = append(out, body)
				history = append(history, map[string]string{"role": "assistant", "content": text.text(seeded(9, conv*100+uint64(t)), mt.Output)})
			}
		}
		return out[:n]
	}
	pick := func(body []byte) {
		f := &dppick.Facts{Ctx: context.Background(), Path: pathChatCompletions, Model: "sim-8b", Body: body}
		tier.Pick(f, cands)
		if len(f.Tokens) == 0 {
			b.Fatal("a turn was not tokenised")
		}
	}
	// The tokenizer loads before the loop, as the daemon preloads it, and
	// conversations other than the measured ones warm its word cache, as
	// a run's first requests do: otherwise a short count (-benchtime 300x)
	// measures the load of tokenizer.json and the first sight of every
	// word, not a pick.
	if err := local.Preload(); err != nil {
		b.Fatal(err)
	}
	for _, body := range bodies(30 * mt.Turns) {
		pick(body)
	}
	b.ReportAllocs()
	reqs := bodies(b.N)
	b.ResetTimer()
	defer reportCPU(b)()
	for i := 0; i < b.N; i++ {
		pick(reqs[i])
	}
}

// pickCosts is the cost state the gateway's kv arm prices with (on by
// default; nil only under --kv-legacy-load-guard): the tier prices every
// candidate with it on every pick, so the benchmarks do too.
func pickCosts() *dppick.Costs { return dppick.NewCosts(dppick.DefaultCostModel()) }

// reportCPU adds cpu-ns/op: this process's user+system CPU (garbage
// collection included) over the loop, per iteration. Unlike ns/op it does
// not count the time the benchmark waited for a core, which on a shared box
// is most of the spread.
func reportCPU(b *testing.B) func() {
	from := proccpu.Self()
	return func() {
		if b.N > 0 {
			b.ReportMetric(float64(proccpu.Self()-from)/float64(b.N), "cpu-ns/op")
		}
	}
}
