package bpe

import (
	"slices"
	"strings"
	"testing"
)

// A segment's ids from the cache are the ids it encodes to: the same long
// text encoded again (served from the cache), embedded between added
// tokens in another text, and encoded with the cache bypassed all agree.
func TestSegmentCacheAgrees(t *testing.T) {
	tok := loadQwen3(t)
	long := strings.Repeat("The cache keeps whole segments; naïve words, 42 numbers and  spaces. ", 12)
	direct := tok.encodeSegment(nil, long)
	first := tok.Encode(long, false)
	again := tok.Encode(long, false)
	if !slices.Equal(first, direct) || !slices.Equal(again, direct) {
		t.Fatalf("cached encoding differs: first %d ids, again %d, direct %d", len(first), len(again), len(direct))
	}
	tok.segMu.RLock()
	_, cached := tok.segs[long]
	tok.segMu.RUnlock()
	if !cached {
		t.Error("a segment of 256 bytes or more was not cached")
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
	got1, got2 := tok.Encode(chat, false), tok.Encode(chat, false)
	if !slices.Equal(got1, want) || !slices.Equal(got2, want) {
		t.Errorf("chat: first %d ids, second %d, want %d (segments encoded one by one)", len(got1), len(got2), len(want))
	}
}
