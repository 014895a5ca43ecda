package radix

import (
	"bytes"
	"strings"
	"testing"
)

// indexMarkerBytes is the byte-at-a-time scan indexMarker must agree with.
func indexMarkerBytes(b []byte) int {
	for i, c := range b {
		if c >= partOther && c <= roleEnd {
			return i
		}
	}
	return -1
}

// TestIndexMarker: every byte value at every position of a 32-byte block,
// of a word and of the tail, on plain text and on the bytes next to the
// marker range (0x19, 0x20, and the same values with the top bit set,
// which UTF-8 text is full of), agrees with the byte loop. Lengths run past
// two blocks and a word, so each of the scan's three loops, and the hand
// over from one to the next, sees every byte value at every offset.
func TestIndexMarker(t *testing.T) {
	for _, tc := range []struct {
		name string
		fill byte
	}{
		{"ascii", 'a'},
		{"below the range", partOther - 1},
		{"above the range", roleEnd + 1},
		{"top bit set", 0x80 | partOther},
		{"all ones", 0xff},
		{"nul", 0},
	} {
		for n := 0; n <= 2*32+8+7; n++ {
			b := bytes.Repeat([]byte{tc.fill}, n)
			for at := 0; at < n; at++ {
				for c := 0; c < 256; c++ {
					b[at] = byte(c)
					if got, want := indexMarker(b), indexMarkerBytes(b); got != want {
						t.Fatalf("%s: len %d, byte %#x at %d: got %d, want %d", tc.name, n, c, at, got, want)
					}
				}
				b[at] = tc.fill
			}
		}
	}
}

// TestIndexMarkerFirstOfMany: with several markers the first one wins,
// inside one word and across words.
func TestIndexMarkerFirstOfMany(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"", -1},
		{"no markers at all, longer than a word", -1},
		{"ab\x1fcd\x1aef", 2},
		{"abcdefg\x1e\x1d", 7},
		{"abcdefgh\x1cijklmnop\x1a", 8},
		{strings.Repeat("é", 20) + "\x1b" + "\x1f", 40},
	} {
		if got := indexMarker([]byte(tc.in)); got != tc.want {
			t.Errorf("indexMarker(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

// FuzzIndexMarker: the word-at-a-time scan agrees with the byte loop on any
// input, from any starting offset (so words straddle every alignment).
func FuzzIndexMarker(f *testing.F) {
	for _, s := range []string{"", "plain text", "a\x1ab", "\x19\x20\x9a\x9f\x1f", strings.Repeat("x", 17) + "\x1c"} {
		f.Add([]byte(s), 0)
	}
	f.Fuzz(func(t *testing.T, in []byte, off int) {
		off = max(off, 0) % (len(in) + 1)
		if got, want := indexMarker(in[off:]), indexMarkerBytes(in[off:]); got != want {
			t.Fatalf("indexMarker(%q) = %d, want %d", in[off:], got, want)
		}
	})
}

// BenchmarkIndexMarker scans a 400 KB marker-free prompt (an agent's
// context), word at a time and byte at a time.
func BenchmarkIndexMarker(b *testing.B) {
	text := []byte(strings.Repeat("func main() {\n\tfmt.Println(\"héllo\")\n}\n", 400<<10/40))
	for _, bc := range []struct {
		name string
		scan func([]byte) int
	}{{"word", indexMarker}, {"byte", indexMarkerBytes}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				if bc.scan(text) != -1 {
					b.Fatal("marker found")
				}
			}
		})
	}
}
