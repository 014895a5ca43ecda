package bpe

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// A segment's ids from the cache are the ids it encodes to: the same long
// text encoded again and again (cached on its second sighting), embedded between added
// tokens in another text, and encoded with the cache bypassed all agree.
func TestSegmentCacheAgrees(t *testing.T) {
	tok := loadQwen3(t)
	long := strings.Repeat("The cache keeps whole segments; naïve words, 42 numbers and  spaces. ", 12)
	direct := tok.encodeSegment(nil, long)
	first := tok.Encode(long, false)  // seen once: on trial
	second := tok.Encode(long, false) // seen again: cached
	third := tok.Encode(long, false)  // from the cache
	if !slices.Equal(first, direct) || !slices.Equal(second, direct) || !slices.Equal(third, direct) {
		t.Fatalf("cached encoding differs: %d, %d, %d ids, direct %d", len(first), len(second), len(third), len(direct))
	}
	tok.segMu.RLock()
	_, cached := tok.segs[long]
	tok.segMu.RUnlock()
	if !cached {
		t.Error("a segment of 256 bytes or more seen twice was not cached")
	}
	chat := "<|im_start|>system\n" + long + "<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
	start, end := tok.addedByText["<|im_start|>"], tok.addedByText["<|im_end|>"]
	want := append([]uint32{start}, tok.encodeSegment(nil, "system\n"+long)...)
	want = append(want, end)
	want = tok.encodeSegment(want, "\n")
	want = append(want, start)
	want = tok.encodeSegment(want, "user\nhi")
	want = append(want, end)
	want = tok.encodeSegment(want, "\n")
	for i := range 3 {
		if got := tok.Encode(chat, false); !slices.Equal(got, want) {
			t.Errorf("chat, encoding %d: %d ids, want %d (segments encoded one by one)", i+1, len(got), len(want))
		}
	}
}

// The word cache's byte count is what it holds (text and ids), so its
// bound (wordCacheBytes) is a bound on memory.
func TestWordCacheBytes(t *testing.T) {
	tok := loadQwen3(t)
	tok.Encode("Words, words and more words: 42 of them, naïve or not.", false)
	tok.cacheMu.RLock()
	defer tok.cacheMu.RUnlock()
	held := 0
	for w, ids := range tok.cache {
		held += len(w) + 4*len(ids)
	}
	if held == 0 || tok.cacheBytes != held {
		t.Fatalf("cacheBytes %d, cache holds %d bytes", tok.cacheBytes, held)
	}
}

// EncodeChat renders each request into a buffer the next one reuses: what
// the caches keep must be copies, or a segment cached from one request
// would read as the next one's text and hand out the wrong ids. Two chats
// of the same length, each cached, then encoded again, agree with a
// tokenizer that never saw the other.
func TestEncodeChatKeepsNoText(t *testing.T) {
	tmpl, err := LoadTemplate(filepath.Join("testdata", "qwen3", "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	tok := loadQwen3(t)
	fresh, err := LoadFile(filepath.Join("testdata", "qwen3", "tokenizer.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	chat := func(word string) []Message {
		return []Message{{Role: RoleSystem, Content: strings.Repeat(word+" routes the cache; ", 24)}, {Role: RoleUser, Content: word}}
	}
	a, b := chat("alpha"), chat("omega") // equal lengths: the same buffer bytes
	for round := range 3 {
		for _, msgs := range [][]Message{a, b} {
			got, err := tok.EncodeChat(tmpl, msgs, true)
			if err != nil {
				t.Fatal(err)
			}
			text, _ := tmpl.Render(msgs, true)
			if want := fresh.encodeSegmentsUncached(text); !slices.Equal(got, want) {
				t.Fatalf("round %d, %q: ids differ at %d from an uncached encoding", round, msgs[1].Content, firstDiff(got, want))
			}
		}
	}
}

// encodeSegmentsUncached is AppendEncode with the segment cache bypassed,
// on a tokenizer used for nothing else.
func (t *Tokenizer) encodeSegmentsUncached(text string) []uint32 {
	var out []uint32
	start := 0
	for i := 0; i < len(text); i++ {
		if a, ok := t.matchAdded(text[i:], t.addedFirst[text[i]]); ok {
			out = t.encodeSegment(out, text[start:i])
			out = append(out, a.id)
			i += len(a.text) - 1
			start = i + 1
		}
	}
	return t.encodeSegment(out, text[start:])
}

// reversed returns a reversed copy of s.
func reversed(s []string) []string {
	r := slices.Clone(s)
	slices.Reverse(r)
	return r
}

// tinyCaches bound the caches so a few chats fill them: every path of the
// segment cache (first sighting, promotion, a full area cleared, a segment
// too large to keep) runs in the parity tests below.
var tinyCaches = Options{SegmentCacheBytes: 64 << 10, SegmentTrialBytes: 16 << 10}

var qwen3Tiny = sync.OnceValues(func() (*Tokenizer, error) {
	return LoadFileWith(filepath.Join("testdata", "qwen3", "tokenizer.json.gz"), tinyCaches)
})

// segmentCases are chats whose messages are long enough for the segment
// cache (and some that are not), built from the parity corpus: unicode
// scripts, combining marks, emoji, control characters, literal special
// tokens inside a message, empty messages, role and template edge cases,
// a message too large for the tiny caches, and pairs that differ in one
// byte at the start, the middle and the end of a long message.
func segmentCases(t *testing.T) []struct {
	name string
	msgs []Message
} {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "corpus.json"))
	if err != nil {
		t.Fatal(err)
	}
	var corpus []string
	if err := json.Unmarshal(raw, &corpus); err != nil {
		t.Fatal(err)
	}
	long := strings.Join(corpus, "\n")
	words := strings.Repeat("route the request to the engine that holds its prefix; ", 8)
	flip := func(s string, i int) string { b := []byte(s); b[i]++; return string(b) }
	sys := func(content string) Message { return Message{Role: RoleSystem, Content: content} }
	user := func(content string) Message { return Message{Role: RoleUser, Content: content} }
	asst := func(content string) Message { return Message{Role: RoleAssistant, Content: content} }
	return []struct {
		name string
		msgs []Message
	}{
		{"unicode corpus as system prompt", []Message{sys(long), user(words), asst(words + "ok"), user("short")}},
		{"corpus reversed as a user turn", []Message{user(strings.Join(reversed(corpus), " ")), asst(long)}},
		{"empty messages", []Message{sys(""), user(""), asst(""), user(words)}},
		{"one byte differs at the start", []Message{sys(flip(words, 0)), user(words)}},
		{"one byte differs in the middle", []Message{sys(flip(words, len(words)/2)), user(words)}},
		{"one byte differs at the end", []Message{sys(flip(words, len(words)-1)), user(words)}},
		{"one byte differs inside a multi-byte rune", []Message{sys(flip(long, strings.Index(long, "中")+1)), user(words)}},
		{"no system prompt, same user text as a system prompt", []Message{user(long), asst(words), user(words)}},
		{"second system turn and an assistant turn with reasoning", []Message{sys(words), user(long), asst("<think>\n" + words + "\n</think>\n\n" + words), sys(words), user(words)}},
		{"reasoning after the last query", []Message{user(words), asst("<think>" + long + "</think>" + words)}},
		{"literal special tokens split a message", []Message{user(words + "<|im_end|>\n<|im_start|>user\n" + words), asst(words)}},
		{"leading and trailing whitespace", []Message{sys("\n\n  " + words + "  \n"), user("\t" + words + "\r\n")}},
		{"a message too large for the tiny caches", []Message{sys(strings.Repeat(long, 16)), user(words)}},
	}
}

// Every chat, encoded turn by turn as a conversation resends its history
// (so each segment is seen once, then again, then from the cache), over
// several rounds, gets exactly the ids of the same rendered text encoded
// without the segment cache — with the default bounds and with bounds so
// tight that the areas are cleared and segments refused all the time. The
// areas' byte counts are what they hold, and within their bounds.
func TestSegmentCacheParity(t *testing.T) {
	tmpl, err := LoadTemplate(filepath.Join("testdata", "qwen3", "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	ref := loadQwen3(t)
	defaults, err := LoadFile(filepath.Join("testdata", "qwen3", "tokenizer.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	tiny, err := qwen3Tiny()
	if err != nil {
		t.Fatal(err)
	}
	cases := segmentCases(t)
	for _, tc := range []struct {
		name string
		tok  *Tokenizer
	}{{"default bounds", defaults}, {"tiny bounds", tiny}} {
		t.Run(tc.name, func(t *testing.T) {
			for round := range 3 {
				for _, c := range cases {
					for turn := 1; turn <= len(c.msgs); turn++ {
						msgs := c.msgs[:turn]
						got, err := tc.tok.EncodeChat(tmpl, msgs, true)
						if err != nil {
							t.Fatalf("%s, turn %d: %v", c.name, turn, err)
						}
						text, _ := tmpl.Render(msgs, true)
						if want := ref.encodeSegmentsUncached(text); !slices.Equal(got, want) {
							t.Fatalf("round %d, %s, turn %d: ids differ at %d (%d ids, want %d)", round, c.name, turn, firstDiff(got, want), len(got), len(want))
						}
						// The same text as a completion prompt: one segment
						// unless the message holds special tokens.
						last := msgs[len(msgs)-1].Content
						if got, want := tc.tok.Encode(last, false), ref.encodeSegmentsUncached(last); !slices.Equal(got, want) {
							t.Fatalf("round %d, %s, turn %d as a prompt: ids differ at %d", round, c.name, turn, firstDiff(got, want))
						}
					}
				}
			}
			checkSegmentBytes(t, tc.tok)
		})
	}
}

// checkSegmentBytes checks that the segment areas' counts are what they
// hold, within their bounds, and that the eviction clock holds exactly the
// cached segments.
func checkSegmentBytes(t *testing.T, tok *Tokenizer) {
	t.Helper()
	tok.segMu.RLock()
	defer tok.segMu.RUnlock()
	held, tried := 0, 0
	for s, c := range tok.segs {
		if s != c.text {
			t.Errorf("cached segment keyed %q holds the text %q", s, c.text)
		}
		held += segmentSize(s, c.ids)
	}
	// The clock holds every cached segment once and nothing else.
	inClock := map[string]bool{}
	r := tok.segClock
	for i := range r.size {
		key := r.buf[(r.head+i)%len(r.buf)]
		if _, held := tok.segs[key]; inClock[key] || !held {
			t.Errorf("the clock's segment %d (%d bytes of text) is a duplicate or not in the cache", i, len(key))
		}
		inClock[key] = true
	}
	if len(inClock) != len(tok.segs) {
		t.Errorf("the clock holds %d segments, the cache %d", len(inClock), len(tok.segs))
	}
	for s, e := range tok.trial {
		if s != e.text {
			t.Errorf("trial segment keyed %q holds the text %q", s, e.text)
		}
		tried += segmentSize(s, e.ids)
	}
	if tok.segBytes != held || tok.trialBytes != tried {
		t.Errorf("segBytes %d, trialBytes %d; the areas hold %d and %d bytes", tok.segBytes, tok.trialBytes, held, tried)
	}
	if held > tok.opts.SegmentCacheBytes || tried > tok.opts.SegmentTrialBytes {
		t.Errorf("the areas hold %d and %d bytes, over their bounds %d and %d", held, tried, tok.opts.SegmentCacheBytes, tok.opts.SegmentTrialBytes)
	}
}

// A segment's first sighting leaves its ids in the trial area, its second
// moves them to the segment cache: a conversation's resent turn is encoded
// once, and a one-off segment never takes a repeated one's place.
func TestSegmentTrialPromotes(t *testing.T) {
	tok, err := LoadFileWith(filepath.Join("testdata", "qwen3", "tokenizer.json.gz"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if tok.opts != DefaultOptions() {
		t.Fatalf("zero Options loaded with %+v, want the defaults %+v", tok.opts, DefaultOptions())
	}
	seg := strings.Repeat("a conversation's turn, resent with the next one. ", 8)
	state := func() (cached, tried bool) {
		tok.segMu.RLock()
		defer tok.segMu.RUnlock()
		_, cached = tok.segs[seg]
		_, tried = tok.trial[seg]
		return cached, tried
	}
	for i, want := range []struct{ cached, tried bool }{
		{false, true}, // seen once: on trial
		{true, false}, // seen again: promoted
		{true, false}, // from the cache
	} {
		tok.Encode(seg, false)
		if cached, tried := state(); cached != want.cached || tried != want.tried {
			t.Errorf("after sighting %d: cached %v, on trial %v; want %v, %v", i+1, cached, tried, want.cached, want.tried)
		}
	}
}

// Requests racing over the same segments (first sightings, promotions and
// clears of the tiny areas at once) all get the uncached encoding's ids.
func TestSegmentCacheConcurrent(t *testing.T) {
	tmpl, err := LoadTemplate(filepath.Join("testdata", "qwen3", "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	ref := loadQwen3(t)
	tok, err := qwen3Tiny()
	if err != nil {
		t.Fatal(err)
	}
	cases := segmentCases(t)
	want := make([][]uint32, len(cases))
	for i, c := range cases {
		text, _ := tmpl.Render(c.msgs, true)
		want[i] = ref.encodeSegmentsUncached(text)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 4 * len(cases) {
				k := (i*(g+1) + g) % len(cases) // each goroutine its own order
				got, err := tok.EncodeChat(tmpl, cases[k].msgs, true)
				if err == nil && !slices.Equal(got, want[k]) {
					err = fmt.Errorf("goroutine %d, %s: ids differ at %d", g, cases[k].name, firstDiff(got, want[k]))
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	checkSegmentBytes(t, tok)
}
