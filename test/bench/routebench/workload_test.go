package main

import (
	"bytes"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/kvexact/bpe"
	"github.com/infergate/infergate/test/enginesim"
)

// The tokenizer is slow to load and the generator immutable: the tests
// share them.
var (
	testOnce sync.Once
	testGen  *textGen
	testErr  error
)

func testText(t *testing.T) *textGen {
	t.Helper()
	testOnce.Do(func() {
		var tok *bpe.Tokenizer
		if tok, _, testErr = enginesim.LoadTokenizer("../../../kvexact/bpe/testdata/qwen3"); testErr != nil {
			return
		}
		if testGen, testErr = newTextGen(tok); testErr != nil {
			return
		}
		// The generator's contract: n words are exactly n tokens, also
		// when texts are concatenated (a shared prefix, then a question).
		for _, n := range []int{1, 16, 500} {
			a, b := testGen.text(seeded(1, uint64(n)), n), testGen.text(seeded(2, uint64(n)), 7)
			if got := len(tok.Encode(a, true)); got != n {
				testErr = fmt.Errorf("text(%d) is %d tokens", n, got)
			}
			if got := len(tok.Encode(a+b, true)); got != n+7 {
				testErr = fmt.Errorf("text(%d)+text(7) is %d tokens", n, got)
			}
		}
	})
	if testErr != nil {
		t.Fatal(testErr)
	}
	return testGen
}

func TestWorkloads(t *testing.T) {
	g := testText(t)
	sp := sharedPrefix{Groups: 4, Prompts: 3, System: 64, Question: 8, Output: 5}
	p := sp.build(g, 1)
	flows := sp.flows(p, 20, 10*time.Second, 1)
	if n := len(flows); n < 120 || n > 280 {
		t.Fatalf("Poisson at 20/s over 10s gave %d arrivals", n)
	}
	if again := sp.flows(sp.build(g, 1), 20, 10*time.Second, 1); !reflect.DeepEqual(flows, again) {
		t.Fatal("shared-prefix flows are not deterministic for a seed")
	}
	for _, f := range flows {
		found := false
		for _, pr := range p.prompts[f.Key] {
			found = found || pr == f.Turns[0].Prompt
		}
		if !found {
			t.Fatalf("flow of group %d sends a prompt of another group", f.Key)
		}
	}
	sys := func(gi int) string { return strings.Join(strings.Fields(p.prompts[gi][0])[:64], " ") }
	for gi := range sp.Groups {
		for pi := range sp.Prompts {
			if !strings.HasPrefix(strings.TrimSpace(p.prompts[gi][pi]), sys(gi)) {
				t.Fatalf("prompt %d/%d lacks its group's system prompt", gi, pi)
			}
		}
		if gi > 0 && sys(gi) == sys(0) {
			t.Fatal("two groups share a system prompt")
		}
	}

	mt := multiTurn{Turns: 3, System: 32, User: 8, Output: 4, Think: 100 * time.Millisecond, ConvID: true}
	convs := mt.flows(g, 9, 10*time.Second, 1, "run")
	if len(convs) < 15 || len(convs) > 50 {
		t.Fatalf("%d conversations at 3/s over 10s", len(convs))
	}
	for _, c := range convs {
		if !c.chat() || len(c.Turns) != 3 || c.ConvID == "" || c.Turns[0].Think != 0 {
			t.Fatalf("conversation %+v", c)
		}
	}
	mt.ConvID = false
	if c := mt.flows(g, 9, time.Second, 1, "run"); len(c) > 0 && c[0].ConvID != "" {
		t.Fatal("the no-id variant sends a conversation id")
	}
}

func TestTraceRoundTripAndReplay(t *testing.T) {
	g := testText(t)
	tg := defaultTraceGen()
	tg.Requests = 200
	recs := tg.generate(3)
	var buf bytes.Buffer
	if err := writeTrace(&buf, recs); err != nil {
		t.Fatal(err)
	}
	back, err := readTrace(&buf)
	if err != nil || !reflect.DeepEqual(back, recs) {
		t.Fatalf("trace round trip: %v", err)
	}
	if _, err := readTrace(strings.NewReader(`{"timestamp":0,"input_length":2000,"output_length":3,"hash_ids":[1]}`)); err == nil {
		t.Fatal("a record longer than its blocks was accepted")
	}
	shared := 0
	for _, r := range recs {
		if r.HashIDs[0] < 1_000_000 {
			shared++
		}
	}
	if shared < 100 {
		t.Fatalf("only %d of 200 records share a prefix", shared)
	}
	// Compressed to 50/s, 200 records at ~1/s last ~4 s; equal hash ids
	// are equal text.
	flows := traceFlows(g, recs, 50, time.Minute, 3, 150)
	if len(flows) != len(recs) {
		t.Fatalf("%d flows from %d records", len(flows), len(recs))
	}
	if last := flows[len(flows)-1].At.Seconds(); math.Abs(last-4) > 1.5 {
		t.Fatalf("replay of 200 records at 50/s ends at %.1fs", last)
	}
	for i, f := range flows {
		if n := len(strings.Fields(f.Turns[0].Prompt)); n != recs[i].InputLength {
			t.Fatalf("record %d: %d tokens, want %d", i, n, recs[i].InputLength)
		}
	}
	for i := range flows {
		for j := i + 1; j < len(flows); j++ {
			if recs[i].HashIDs[0] == recs[j].HashIDs[0] {
				a, b := strings.Fields(flows[i].Turns[0].Prompt), strings.Fields(flows[j].Turns[0].Prompt)
				if strings.Join(a[:100], " ") != strings.Join(b[:100], " ") {
					t.Fatalf("records %d and %d share block %d but not its text", i, j, recs[i].HashIDs[0])
				}
				break
			}
		}
	}
}

func TestSummarise(t *testing.T) {
	cfg := defaultConfig()
	res := []*result{
		{Status: 200, TTFT: 0.1, E2E: 1, Tokens: 10, ITLMean: 0.02, Prompt: 100, Cached: 80, IdealHit: 90, IdealOf: 100, itl: []float64{0.02, 0.02}},
		{Status: 200, TTFT: 3, E2E: 4, Tokens: 10, ITLMean: 0.02, Prompt: 100, Cached: 0, IdealHit: 90, IdealOf: 100},
		{Status: 503, TTFT: -1, E2E: 0.01, Err: "status 503", IdealHit: 0, IdealOf: 100},
		{TTFT: -1, E2E: 9, Err: "context deadline exceeded", IdealHit: 90, IdealOf: 100},
	}
	s := summarise(res, 2*time.Second, cfg)
	if s.N != 4 || s.OK != 2 || s.Errors != 0 || s.Unanswered != 2 || s.Goodput != 0.5 {
		t.Fatalf("n %d ok %d errors %d unanswered %d goodput %v", s.N, s.OK, s.Errors, s.Unanswered, s.Goodput)
	}
	// The cut request enters TTFT with the 9 s it waited.
	if s.Lost != 1 || s.LostTTFT != 3 {
		t.Fatalf("lost %d (TTFT %v), want the second request (0 of 90 ideal tokens cached)", s.Lost, s.LostTTFT)
	}
	if s.TTFT.P99 != 9 || s.ClientHit != 0.4 || s.IdealHitRate != 0.675 {
		t.Fatalf("ttft %+v client hit %v ideal %v", s.TTFT, s.ClientHit, s.IdealHitRate)
	}
}
