package ladder

import (
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
// (BodyScanned) are tokenised from the members it found, with the same
// ids and pick as the tier's own scan; with neither member handed on the
// tokenizer decodes the body itself, as after a scan that found neither.
func TestKVExactScannedBody(t *testing.T) {
	p := newChatBenchPick(t)
	body := p.facts(7).Body
	top := ScanBody(body)
	tests := []struct {
		name     string
		scanned  bool
		messages []byte
	}{
		{"tier scans the body", false, nil},
		{"caller scanned it", true, top.Messages},
		{"caller handed on neither member", true, nil},
	}
	var want []uint32
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &Facts{Ctx: context.Background(), Path: "/v1/chat/completions", Model: "m", Body: body,
				Messages: tc.messages, BodyScanned: tc.scanned}
			idx, reason, ok := p.tier.Pick(f, p.cands)
			if !ok || p.cands[idx].ID != "ep7" {
				t.Fatalf("pick %d %q %v, want ep7 (holds shared prompt 7)", idx, reason, ok)
			}
			if want == nil {
				want = f.Tokens
			} else if !slices.Equal(f.Tokens, want) {
				t.Fatalf("%d tokens differ from the tier's own scan (%d)", len(f.Tokens), len(want))
			}
		})
	}
}
