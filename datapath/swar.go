package datapath

// Eight bytes at a time (SWAR), for the request line checks
// (pathshape.go): a word is read and all its bytes tested with a few
// operations. The tests are exact as to whether some byte of the word is
// flagged (no borrow reaches the lowest flagged byte). A string of eight
// bytes or more ends in a word that overlaps the one before it, so no
// byte is left to a loop. Why: the byte loops over the method, target
// and path were ~430 instructions of a small request (callgrind), the
// path being read twice. (h1's parser has its own copy of these three:
// the packages share no internals.)
const (
	swarOnes  = 0x0101010101010101
	swarHighs = 0x8080808080808080
)

// word8 is the eight bytes of s (len(s) == 8), little-endian: the
// compiler makes it one load.
func word8(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// byteBelow reports whether some byte of x is below n (n <= 128).
func byteBelow(x uint64, n byte) bool { return (x-swarOnes*uint64(n))&^x&swarHighs != 0 }

// byteIs reports whether some byte of x is b.
func byteIs(x uint64, b byte) bool { return byteBelow(x^(swarOnes*uint64(b)), 1) }
