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
	flows := sp.flows(p, 20, 20, 10*time.Second, 1)
	if n := len(flows); n < 120 || n > 280 {
		t.Fatalf("Poisson at 20/s over 10s gave %d arrivals", n)
	}
	if again := sp.flows(sp.build(g, 1), 20, 20, 10*time.Second, 1); !reflect.DeepEqual(flows, again) {
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
	// Kept: the first request only (the others lost affinity or failed);
	// the mean counts every request as the percentiles do.
	if s.Kept != 1 || s.KeptTTFT.P50 != 0.1 || math.Abs(s.TTFTMean-(0.1+3+0.01+9)/4) > 1e-9 {
		t.Fatalf("kept %d (TTFT %+v), mean %v", s.Kept, s.KeptTTFT, s.TTFTMean)
	}
}

// TestWarmupCoversGroups: the shared-prefix flows send every group once
// before any repeats, a shorter run's flows are a prefix of a longer one's,
// and the warm-up lasts until every group was sent and answered (bounded).
func TestWarmupCoversGroups(t *testing.T) {
	g := testText(t)
	sp := sharedPrefix{Groups: 8, Prompts: 2, System: 32, Question: 4, Output: 2}
	p := sp.build(g, 1)
	long := sp.flows(p, 20, 20, 10*time.Second, 1)
	short := sp.flows(p, 20, 20, 4*time.Second, 1)
	if len(short) == 0 || !reflect.DeepEqual(short, long[:len(short)]) {
		t.Fatal("the flows over 4 s are not a prefix of the flows over 10 s")
	}
	first := map[int]bool{}
	for _, f := range long[:sp.Groups] {
		first[f.Key] = true
	}
	if len(first) != sp.Groups {
		t.Fatalf("the first %d arrivals sent %d groups", sp.Groups, len(first))
	}
	if at, ok := coveredAt(long, sp.Groups); !ok || at != long[sp.Groups-1].At {
		t.Fatalf("covered at %v (%v), want the %dth arrival's %v", at, ok, sp.Groups, long[sp.Groups-1].At)
	}

	w := workload{groups: sp.Groups, perRequest: 100 * time.Millisecond,
		flows: func(r, first float64, d time.Duration, _ string) []flow { return sp.flows(p, r, first, d, 1) }}
	tm := timing{warm: time.Second, warmMax: 3 * time.Second, run: 2 * time.Second}
	for _, c := range []struct {
		name        string
		rate        float64
		w           workload
		wantCovered bool
		want        func(flows []flow) time.Duration // the window's start
	}{
		// 8 arrivals at 1,000/s take ~8 ms: the 1 s minimum stands.
		{"fast", 1000, w, true, func([]flow) time.Duration { return time.Second }},
		// At 4/s the 8th arrival comes at ~2 s: the window opens two
		// modelled requests after it.
		{"slow", 4, w, true, func(f []flow) time.Duration { return f[7].At + 200*time.Millisecond }},
		// At 0.2/s the 5 s of flows hold about one arrival: the bound.
		{"too slow", 0.2, w, false, func([]flow) time.Duration { return 3 * time.Second }},
		{"no groups", 4, workload{flows: w.flows, settle: 1500 * time.Millisecond}, true, func([]flow) time.Duration { return 1500 * time.Millisecond }},
	} {
		warm, flows, covered := c.w.schedule(c.rate, 2*c.rate, tm, "")
		again, _, _ := c.w.schedule(c.rate, 2*c.rate, tm, "")
		if covered != c.wantCovered || warm != c.want(flows) {
			t.Errorf("%s: warm-up %v covered %v, want %v %v", c.name, warm, covered, c.want(flows), c.wantCovered)
		}
		if warm != again {
			t.Errorf("%s: two arms got warm-ups of %v and %v", c.name, warm, again)
		}
		if n := len(flows); n > 0 && flows[n-1].At >= warm+tm.run {
			t.Errorf("%s: a flow starts at %v, after the window's end %v", c.name, flows[n-1].At, warm+tm.run)
		}
	}
}

// TestFirstSightAndTail: first-sight requests (nothing of the prompt seen
// before) are counted apart, and the tail notes say what the slowest
// request was and what its engine was busy with.
func TestFirstSightAndTail(t *testing.T) {
	long := &result{Start: 0.5, Status: 200, TTFT: 0.6, E2E: 2, Tokens: 5, Prompt: 2200, Cached: 0, IdealHit: 0, IdealOf: 2200, Engine: "e1"}
	hit := &result{Start: 0.9, Status: 200, TTFT: 0.4, E2E: 1, Tokens: 5, Prompt: 2200, Cached: 2000, IdealHit: 2000, IdealOf: 2200, Engine: "e1"}
	other := &result{Start: 0.7, Status: 200, TTFT: 0.1, E2E: 1, Tokens: 5, Prompt: 2200, Cached: 2000, IdealHit: 2000, IdealOf: 2200, Engine: "e2"}
	lost := &result{Start: 1.2, Status: 200, TTFT: 0.3, E2E: 1, Tokens: 5, Prompt: 2200, Cached: 0, IdealHit: 2000, IdealOf: 2200, Engine: "e2"}
	measured := []*result{hit, other, lost}
	s := summarise(measured, time.Second, defaultConfig())
	if s.FirstSight != 0 || s.Seen != 3 || s.SeenTTFT.P99 != 0.4 {
		t.Fatalf("first sight %d, seen %d p99 %v", s.FirstSight, s.Seen, s.SeenTTFT.P99)
	}
	s = summarise([]*result{long, hit, other, lost}, time.Second, defaultConfig())
	if s.FirstSight != 1 || s.FirstSightWorst != 0.6 || s.Seen != 3 {
		t.Fatalf("first sight %d (worst %v), seen %d", s.FirstSight, s.FirstSightWorst, s.Seen)
	}

	// The warm-up's long prefill (started 0.5 s, first token at 1.1 s) is
	// still computing on e1 when the hit arrives at 0.9 s.
	notes := tailNotes([]*result{long, other, hit, lost}, measured)
	want := []string{"TTFT 0.400 s at 0.90 s, hit (2000 of 2200 prompt tokens cached, ideal 2000); e1 had 1 in flight, 1 of them before their first token with ≥ 1000 uncached tokens"}
	if !reflect.DeepEqual(notes, want) {
		t.Fatalf("tail notes\n%q\nwant\n%q", notes, want)
	}
	lost.TTFT = 0.9
	if notes := tailNotes([]*result{long, other, hit, lost}, measured); len(notes) != 1 || !strings.Contains(notes[0], "lost affinity") || !strings.Contains(notes[0], "e2 had 1 in flight, 0 of them") {
		t.Fatalf("tail notes %q, want the lost request on e2 beside one decoding hit", notes)
	}
}

// TestFirstSightsPaced: with first sights paced below the arrival rate the
// run begins as a run at the paced rate does (the same G arrivals, every
// group once), then arrivals come at the full rate; the window opens the
// warm-up's minimum after the last first sight.
func TestFirstSightsPaced(t *testing.T) {
	g := testText(t)
	sp := sharedPrefix{Groups: 64, Prompts: 2, System: 16, Question: 4, Output: 2}
	p := sp.build(g, 1)
	const rate, firstRate = 30.0, 10.0
	d := 20 * time.Second
	for seed := uint64(1); seed <= 5; seed++ {
		paced := sp.flows(p, rate, firstRate, d, seed)
		slow := sp.flows(p, firstRate, firstRate, d, seed)
		if !reflect.DeepEqual(paced[:sp.Groups], slow[:sp.Groups]) {
			t.Fatalf("seed %d: the first %d paced arrivals are not those of a run at %v/s", seed, sp.Groups, firstRate)
		}
		short := sp.flows(p, rate, firstRate, 8*time.Second, seed)
		if !reflect.DeepEqual(short, paced[:len(short)]) {
			t.Fatalf("seed %d: the paced flows over 8 s are not a prefix of those over 20 s", seed)
		}
		at, ok := coveredAt(paced, sp.Groups)
		if !ok || at != paced[sp.Groups-1].At {
			t.Fatalf("seed %d: every group sent by %v (%v), want the %dth arrival's %v", seed, at, ok, sp.Groups, paced[sp.Groups-1].At)
		}
		// After the first sights: Poisson at 30/s over ≈ 14 s, ≈ 420 ± 20.
		after := len(paced) - sp.Groups
		if want := rate * (d - at).Seconds(); float64(after) < 0.8*want || float64(after) > 1.2*want {
			t.Fatalf("seed %d: %d arrivals in the %v after the first sights, want about %.0f", seed, after, d-at, want)
		}
	}
	if n := len(sp.flows(p, rate, firstRate, 2*time.Second, 1)); n >= sp.Groups {
		t.Fatalf("%d arrivals in 2 s, want only first sights (fewer than %d at %v/s)", n, sp.Groups, firstRate)
	}

	for _, c := range []struct{ rate, capacity, want float64 }{
		{10, 20, 10}, // 50 %: unpaced
		{14, 20, 14}, // 70 %: unpaced
		{30, 20, 14}, // 150 %: the 70 % load's rate
		{30, 0, 30},  // capacity unknown: unpaced
	} {
		if got := firstSightRate(c.rate, c.capacity); got != c.want {
			t.Errorf("firstSightRate(%v, %v) = %v, want %v", c.rate, c.capacity, got, c.want)
		}
	}

	// At 150 % of capacity the schedule paces the first sights at 70 % of
	// it and opens the window the warm-up's 1 s after the last one.
	w := workload{groups: sp.Groups, perRequest: 100 * time.Millisecond,
		flows: func(r, first float64, d time.Duration, _ string) []flow { return sp.flows(p, r, first, d, 1) }}
	tm := timing{warm: time.Second, warmMax: 12 * time.Second, run: 2 * time.Second}
	warm, flows, covered := w.schedule(30, 20, tm, "")
	paced := sp.flows(p, 30, 14, 14*time.Second, 1)
	at, _ := coveredAt(paced, sp.Groups)
	if !covered || warm != at+time.Second || !reflect.DeepEqual(flows, startingBefore(paced, warm+tm.run)) {
		t.Fatalf("warm-up %v (covered %v), want the paced flows with the window at %v", warm, covered, at+time.Second)
	}
}
