// Package swar tests eight bytes of a string at a time (SIMD within a
// register): a word is read in one load and all its bytes tested with a
// few integer operations. The request-line and header checks of the lean
// front end (datapath/h1) and of the handler (datapath) use it; one copy,
// so both refuse exactly the same bytes.
//
// The tests are exact as to whether some byte of a word is flagged, and
// as to which is the first (no borrow reaches the lowest flagged byte),
// not as to the bytes after it: a caller that needs more than the first
// looks byte by byte from there.
package swar

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// Word8 is the eight bytes of s (len(s) == 8), little-endian: the compiler
// makes it one load.
func Word8(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// ByteBelow reports whether some byte of x is below n (n <= 128).
func ByteBelow(x uint64, n byte) bool { return Below(x, n) != 0 }

// ByteIs reports whether some byte of x is b.
func ByteIs(x uint64, b byte) bool { return Is(x, b) != 0 }

// Below flags the bytes of x below n (n <= 128) by their high bits, and
// may flag bytes above a flagged one besides; its lowest flag is exact,
// so bits.TrailingZeros64(m)/8 of a nonzero m, or of several such masks
// or'ed, is the first byte any of them flags.
func Below(x uint64, n byte) uint64 { return (x - ones*uint64(n)) &^ x & highs }

// Is flags the bytes of x equal to b as Below does (its lowest exact).
func Is(x uint64, b byte) uint64 { return Below(x^(ones*uint64(b)), 1) }

// Eq flags exactly the bytes of x equal to b by their high bits, every
// one of them (no borrow: each byte's test stays in its byte), for a
// caller that counts them. Two operations dearer than Is.
func Eq(x uint64, b byte) uint64 {
	const lows = ^uint64(highs)
	t := x ^ (ones * uint64(b))
	return ^((t&lows + lows) | t) & highs
}

// Plain reports whether t holds no byte ≤ ' ' (whitespace, control bytes)
// and no DEL: what a request target must be. A string of eight bytes or
// more ends in a word that overlaps the one before it, so no byte is left
// to a loop.
func Plain(t string) bool {
	if len(t) >= 8 {
		for i := 0; i+8 < len(t); i += 8 {
			if x := Word8(t[i : i+8]); ByteBelow(x, ' '+1) || ByteIs(x, 0x7f) {
				return false
			}
		}
		x := Word8(t[len(t)-8:])
		return !ByteBelow(x, ' '+1) && !ByteIs(x, 0x7f)
	}
	for i := 0; i < len(t); i++ {
		if c := t[i]; c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}
