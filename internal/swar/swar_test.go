package swar

import "testing"

// TestWordTests puts every byte value at every position of a word of
// filler and compares ByteBelow and ByteIs with a byte loop.
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
					want := false
					for _, c := range w {
						want = want || c == b
					}
					if got := ByteIs(x, b); got != want {
						t.Fatalf("ByteIs(%q, %#x) = %v, want %v", w, b, got, want)
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
