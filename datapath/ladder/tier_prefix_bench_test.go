package ladder

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/infergate/infergate/radix"
)

const (
	benchPromptBytes = 8 << 10
	benchSystemBytes = 2 << 10
	benchSystems     = 64
	benchStored      = 100_000
)

func fillBench(r *rand.Rand, b []byte) {
	const alphabet = "abcdefghijklmnopqrstuvwxyz      .,\n"
	for i := range b {
		b[i] = alphabet[r.IntN(len(alphabet))]
	}
}

type benchPrompts struct{ systems [][]byte }

func newBenchPrompts() *benchPrompts {
	g := &benchPrompts{}
	r := rand.New(rand.NewPCG(1, 2))
	for range benchSystems {
		s := make([]byte, benchSystemBytes)
		fillBench(r, s)
		g.systems = append(g.systems, s)
	}
	return g
}

// prompt i: one of 64 shared 2 KiB system prompts and a tail unique to i.
func (g *benchPrompts) prompt(buf []byte, i int) []byte {
	buf = append(slices.Grow(buf[:0], benchPromptBytes), g.systems[i%benchSystems]...)
	n := len(buf)
	buf = buf[:benchPromptBytes]
	fillBench(rand.New(rand.NewPCG(uint64(i), 7)), buf[n:])
	return buf
}

// BenchmarkPrefixTier measures one request's Tier 1 cost (Pick + Observe of
// a new 8 KiB prompt that shares a system prompt with stored ones) against
// 100k stored prompts, next to the baseline of hashing the prompt once
// (xxhash) and of keying it from a JSON body (PromptKey).
func BenchmarkPrefixTier(b *testing.B) {
	g := newBenchPrompts()
	o := radix.DefaultOptions()
	o.BudgetBytes = 4 << 30 // nothing evicted: full size
	ix, err := radix.New(o)
	if err != nil {
		b.Fatal(err)
	}
	tier := NewPrefixTier(PrefixOptions{Index: ix, Threshold: 20, BalanceAbs: 3})
	c := make([]Candidate, 8)
	for i := range c {
		c[i] = Candidate{ID: "10.0.0." + strconv.Itoa(i+1) + ":8000", Index: i}
	}
	buf := make([]byte, benchPromptBytes)
	for i := range benchStored {
		tier.Observe(&Facts{PromptKey: g.prompt(buf, i)}, c[i%len(c)])
	}
	body, _ := json.Marshal(map[string]string{"prompt": string(g.prompt(buf, 0))})

	b.Run("baseline_xxhash_8KiB", func(b *testing.B) {
		p := g.prompt(nil, benchStored)
		var sink uint64
		for b.Loop() {
			sink += xxhash.Sum64(p)
		}
		_ = sink
	})
	b.Run("PromptKey_8KiB_body", func(b *testing.B) {
		kb := make([]byte, 0, benchPromptBytes+64)
		for b.Loop() {
			kb = PromptKey("/v1/completions", body, kb)
		}
	})
	b.Run("Pick+Observe_100k_stored", func(b *testing.B) {
		i := benchStored
		p := g.prompt(nil, benchStored)
		for b.Loop() {
			// A new prompt each iteration: a stored system prompt, then a
			// unique counter where the tail starts, then a fixed tail.
			copy(p, g.systems[i%benchSystems])
			strconv.AppendInt(p[benchSystemBytes:benchSystemBytes], int64(i), 10)
			f := &Facts{PromptKey: p}
			idx, _, ok := tier.Pick(f, c)
			if !ok {
				idx = 0
			}
			tier.Observe(f, c[idx])
			i++
		}
	})
}
