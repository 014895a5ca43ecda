package bpe

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A segment's ids from the cache are the ids it encodes to: the same long
// text encoded again and again (cached on its second sighting), embedded between added
// tokens in another text, and encoded with the cache bypassed all agree.
func TestSegmentCacheAgrees(t *testing.T) {
	tok := loadQwen3(t)
	long := strings.Repeat("The cache keeps whole segments; naïve words, 42 numbers and  spaces. ", 12)
	direct := tok.encodeSegment(nil, long)
	first := tok.Encode(long, false)  // seen once: only its hash is kept
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
