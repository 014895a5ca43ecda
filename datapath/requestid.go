package datapath

import (
	"encoding/binary"
	"math/rand/v2"
	"unsafe"
)

// requestIDLen is a minted request id's length: 32 lowercase hex digits.
const requestIDLen = 32

// idBatch is how many ids an idMint spells at once.
const idBatch = 16

// idMint hands out minted request ids from batches spelled into one
// string each. Why: each id was a 32-byte allocation of its own, ~170
// instructions of a small request in the allocator (callgrind); a batch
// is one allocation for idBatch ids. The batch is pointer-free, so an id kept past its request
// (a span awaiting export, a log line, P/D bookkeeping) keeps at most its
// batch's 512 B alive, never the exchange or the request.
//
// A mint belongs to one exchange and goes with it from request to request
// (newExchange keeps it across the reset), so it needs no lock: an
// exchange serves one request at a time.
type idMint struct {
	left string // ids of the current batch not handed out, requestIDLen bytes each
}

// next is a new request id: 32 lowercase hex digits (128 random bits).
// A nil mint (an exchange the front end does not recycle) mints the id
// alone.
func (m *idMint) next() string {
	if m == nil {
		return newRequestID()
	}
	s := m.left
	if len(s) < requestIDLen {
		s = mintIDs(idBatch)
	}
	m.left = s[requestIDLen:]
	return s[:requestIDLen]
}

// mintIDs spells n request ids back to back in one string: each straight
// into the batch's bytes, which the string then is (as strings.Builder
// does; nothing writes them after), where a Builder copied each id in.
func mintIDs(n int) string {
	b := make([]byte, n*requestIDLen)
	for i := 0; i < len(b); i += requestIDLen {
		putRequestID((*[requestIDLen]byte)(b[i:]), rand.Uint64(), rand.Uint64())
	}
	return unsafe.String(&b[0], len(b))
}

// newRequestID mints a request id (32 lowercase hex digits, 128 random
// bits) for a request whose exchange has no mint (the front end does not
// recycle exchanges).
// It is a string of its own, not one over the exchange's memory: an id
// outlives its request in traces, logs and P/D bookkeeping, and a string
// into the exchange would keep the exchange (and the request it points to)
// alive with it.
func newRequestID() string {
	return requestIDOf(rand.Uint64(), rand.Uint64())
}

// requestIDOf spells the 128 bits a, b as 32 lowercase hex digits in one
// allocation (putRequestID).
func requestIDOf(a, b uint64) string {
	var out [requestIDLen]byte
	putRequestID(&out, a, b)
	return string(out[:])
}

// putRequestID spells the 128 bits a, b into out as 32 lowercase hex
// digits: out[0:8] the low nibbles of a's bytes, least significant byte
// first, out[8:16] their high nibbles, then b's the same way (spellWord).
// Each bit lands in exactly one digit, so random words give a random id;
// the order is not hex.EncodeToString's, which nothing needs (an id is
// only compared and sampled by). Why this order: each digit is a nibble
// already in a byte of its own, where the big-endian spelling first spread
// the nibbles of each half word apart (three shifts, ors and masks) and
// swapped the bytes: 97 instructions an id (callgrind), now 44.
func putRequestID(out *[requestIDLen]byte, a, b uint64) {
	spellWord((*[16]byte)(out[:16]), a)
	spellWord((*[16]byte)(out[16:]), b)
}

// spellWord spells w's 16 nibbles as putRequestID says: the low nibble of
// each byte into out[0:8], the high one into out[8:16], in the word's
// little-endian byte order.
func spellWord(out *[16]byte, w uint64) {
	const low = 0x0f0f0f0f0f0f0f0f
	binary.LittleEndian.PutUint64(out[:8], hexBytes(w&low))
	binary.LittleEndian.PutUint64(out[8:], hexBytes(w>>4&low))
}

// hexBytes turns each byte of x, a nibble (0 to 15), into its lowercase
// hex digit: offset to '0' and, where it is ten or more, on to 'a'.
func hexBytes(x uint64) uint64 {
	// Bit 4 of nibble+6 is set exactly for 10..15; no byte carries over.
	ten := ((x + 0x0606060606060606) >> 4) & 0x0101010101010101
	return x + 0x3030303030303030 + ten*('a'-'0'-10)
}
