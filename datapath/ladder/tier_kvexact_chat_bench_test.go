package ladder

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/infergate/infergate/datapath/pick"
	"github.com/infergate/infergate/internal/chatload"
	"github.com/infergate/infergate/kvexact"
	"github.com/infergate/infergate/kvexact/bpe"
	"github.com/infergate/infergate/kvexact/tokenize"
	"github.com/infergate/infergate/test/bench/proccpu"
)

// chatBenchTokenizer is the Qwen3 tokenizer eppload's EPP loads.
const chatBenchTokenizer = "../../kvexact/bpe/testdata/qwen3"

// chatBenchPick is a KV-exact tier shaped like eppload's EPP: 16 trusted
// endpoints, endpoint i holding the full blocks of shared prompt j for
// every j mod 16 = i (64 prompts, 8 KB chats), the in-process tokenizer
// and the cost model.
type chatBenchPick struct {
	tier  *KVExact
	cands []Candidate
	sys   []string
}

func newChatBenchPick(tb testing.TB) *chatBenchPick {
	tb.Helper()
	const endpoints, prefixes, size = 16, 64, 8 << 10
	tok, err := bpe.LoadFile(chatBenchTokenizer + "/" + tokenize.FileTokenizerGz)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl, err := bpe.LoadTemplate(chatBenchTokenizer + "/" + tokenize.FileTokenizerConfig)
	if err != nil {
		tb.Fatal(err)
	}
	inv := kvexact.NewInventory(kvexact.Options{Rule: "r", BlockSize: 16})
	sys := chatload.SystemPrompts(prefixes, size)
	for j := range prefixes {
		var req struct {
			Messages []bpe.Message `json:"messages"`
		}
		if err := json.Unmarshal(chatload.Body("m", sys[j], uint64(j), size), &req); err != nil {
			tb.Fatal(err)
		}
		ids, err := tok.EncodeChat(tmpl, req.Messages, true)
		if err != nil {
			tb.Fatal(err)
		}
		ev := kvexact.Event{Kind: kvexact.EventBlockStored, BlockSize: 16, TokenIDs: ids[:len(ids)/16*16]}
		for b := range len(ids) / 16 {
			ev.BlockHashes = append(ev.BlockHashes, uint64(j+1)<<32|uint64(b))
		}
		// Each endpoint's batches in sequence (1, 2, …): a repeated
		// sequence number reads as an engine restart and clears it.
		inv.Apply(fmt.Sprintf("ep%d", j%endpoints), 0, uint64(j/endpoints+1), kvexact.Batch{Events: []kvexact.Event{ev}})
	}
	p := &chatBenchPick{sys: sys}
	for e := range endpoints {
		ep := fmt.Sprintf("ep%d", e)
		if err := inv.SetConnected(ep, 0, true); err != nil {
			tb.Fatal(err)
		}
		if err := inv.MarkRebuilt(ep, 0); err != nil {
			tb.Fatal(err)
		}
		p.cands = append(p.cands, Candidate{ID: ep, Index: e, Load: e % 3})
	}
	local := tokenize.NewLocal(tokenize.LocalOptions{Models: map[string]string{tokenize.AnyModel: chatBenchTokenizer}})
	if err := local.Preload(); err != nil {
		tb.Fatal(err)
	}
	cost := pick.DefaultCostModel()
	p.tier = NewKVExact(KVExactOptions{Rule: "r", Index: inv, Tokenizer: tokenize.Chain{Local: local}, Cost: &cost})
	return p
}

// facts is request seq of eppload's workload (its shared prompt seq mod 64).
func (p *chatBenchPick) facts(seq int) *Facts {
	return &Facts{Ctx: context.Background(), Path: "/v1/chat/completions", Model: "m",
		Body: chatload.Body("m", p.sys[seq%len(p.sys)], uint64(seq), 8<<10)}
}

// BenchmarkKVExactChat is the KV-exact pick of an eppload request without
// the EPP around it: tokenising the 8 KB chat (its shared system prompt
// from the segment cache, the unique user turn encoded), hashing the
// blocks, scoring 16 inventories and pricing every candidate.
func BenchmarkKVExactChat(b *testing.B) {
	p := newChatBenchPick(b)
	const warm = 256 // every shared prompt promoted to the segment cache
	for i := range warm {
		if _, reason, ok := p.tier.Pick(p.facts(100_000+i), p.cands); !ok {
			b.Fatalf("warm-up pick %d missed: %s", i, reason)
		}
	}
	facts := make([]*Facts, 0, 4096)
	for i := range cap(facts) {
		facts = append(facts, p.facts(200_000+i))
	}
	b.ReportAllocs()
	cpu0 := proccpu.Self()
	i := 0
	for b.Loop() {
		f := facts[i%len(facts)]
		f.Tokens, f.KVHeld, f.Priced, f.PromptTokens = nil, nil, nil, 0
		i++
		if _, reason, ok := p.tier.Pick(f, p.cands); !ok {
			b.Fatalf("pick missed: %s", reason)
		}
	}
	b.ReportMetric(float64(proccpu.Self()-cpu0)/float64(b.N), "cpu-ns/op")
}

// TestKVExactScannedBody: facts whose caller already scanned the body
// (ScanFacts) are tokenised from the members it found, with the same ids
// and pick as the tier's own scan; the tier tokenises the member handed on,
// not the body's (a member of another body moves the pick); with neither
// member handed on the tokenizer decodes the body itself, as after a scan
// that found neither.
func TestKVExactScannedBody(t *testing.T) {
	p := newChatBenchPick(t)
	body := p.facts(7).Body
	other := ScanBody(p.facts(8).Body).Messages // shared prompt 8's chat
	if f := (&Facts{Body: body}); ScanFacts(f).Messages == nil || !f.BodyScanned || !bytes.Equal(f.Messages, ScanBody(body).Messages) {
		t.Fatalf("ScanFacts handed on messages %.20q (scanned %v), want the body's", f.Messages, f.BodyScanned)
	}
	tests := []struct {
		name    string
		hand    func(f *Facts)
		want    string // the endpoint holding the tokenised shared prompt
		sameIDs bool   // the ids of the tier's own scan
	}{
		{"tier scans the body", func(*Facts) {}, "ep7", true},
		{"caller scanned it", func(f *Facts) { ScanFacts(f) }, "ep7", true},
		{"caller handed on neither member", func(f *Facts) { f.BodyScanned = true }, "ep7", true},
		{"caller handed on another body's messages", func(f *Facts) { f.Messages, f.BodyScanned = other, true }, "ep8", false},
	}
	var want []uint32
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &Facts{Ctx: context.Background(), Path: "/v1/chat/completions", Model: "m", Body: body}
			tc.hand(f)
			idx, reason, ok := p.tier.Pick(f, p.cands)
			if !ok || p.cands[idx].ID != tc.want {
				t.Fatalf("pick %d %q %v, want %s (holds the shared prompt tokenised)", idx, reason, ok, tc.want)
			}
			switch {
			case want == nil:
				want = f.Tokens
			case tc.sameIDs != slices.Equal(f.Tokens, want):
				t.Fatalf("%d tokens, the tier's own scan %d: same %v, want same %v", len(f.Tokens), len(want), !tc.sameIDs, tc.sameIDs)
			}
		})
	}
}
