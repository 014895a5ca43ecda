package swar

import (
	"math/bits"
	"testing"
)

// TestWordTests puts every byte value at every position of a word of
// filler and compares ByteBelow, ByteIs and Eq with a byte loop.
func TestWordTests(t *testing.T) {
	fillers := []byte{'a', 0x00, 0x7f, 0x80, 0xff}
	for _, fill := range fillers {
		for pos := range 8 {
			for v := range 256 {
				w := []byte{fill, fill, fill, fill, fill, fill, fill, fill}
				w[pos] = byte(v)
				x := Word8(string(w))
				for _, n := range []byte{1, ' ', ' ' + 1, '\r' + 1, 128} {
					want := false
					for _, c := range w {
						want = want || c < n
					}
					if got := ByteBelow(x, n); got != want {
						t.Fatalf("ByteBelow(%q, %#x) = %v, want %v", w, n, got, want)
					}
				}
				for _, b := range []byte{0x7f, '\\', '.', 0} {
					want, wantEq := false, uint64(0)
					for i, c := range w {
						want = want || c == b
						if c == b {
							wantEq |= 0x80 << (8 * i)
						}
					}
					if got := ByteIs(x, b); got != want {
						t.Fatalf("ByteIs(%q, %#x) = %v, want %v", w, b, got, want)
					}
					if got := Eq(x, b); got != wantEq {
						t.Fatalf("Eq(%q, %#x) = %#x, want %#x", w, b, got, wantEq)
					}
				}
			}
		}
	}
}

// TestPlain puts every byte value at every position of targets of the
// lengths around a word's and compares Plain with a byte loop.
func TestPlain(t *testing.T) {
	for _, n := range []int{1, 7, 8, 9, 15, 16, 17, 24} {
		for pos := range n {
			for v := range 256 {
				b := make([]byte, n)
				for i := range b {
					b[i] = '/'
				}
				b[pos] = byte(v)
				want := !(byte(v) <= ' ' || byte(v) == 0x7f)
				if got := Plain(string(b)); got != want {
					t.Fatalf("Plain(%q) = %v, want %v", b, got, want)
				}
			}
		}
	}
	if !Plain("") {
		t.Fatal(`Plain("") = false, want true`)
	}
}

// TestFirstFlag puts two bytes of every value at every pair of positions
// of a word of filler and compares the first byte Below and Is flag
// (their masks or'ed, as a caller scanning for several bytes does) with
// a byte loop.
func TestFirstFlag(t *testing.T) {
	for a := range 8 {
		for b := a; b < 8; b++ {
			for v := range 256 {
				w := []byte("aaaaaaaa")
				w[a], w[b] = byte(v), byte(255-v)
				m := Below(Word8(string(w)), ' '+1) | Is(Word8(string(w)), '%') | Is(Word8(string(w)), '?')
				want := 8
				for i, c := range w {
					if c <= ' ' || c == '%' || c == '?' {
						want = i
						break
					}
				}
				if got := bits.TrailingZeros64(m) / 8; got != want {
					t.Fatalf("first flagged byte of %q: %d, want %d", w, got, want)
				}
			}
		}
	}
}
