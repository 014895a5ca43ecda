package jsonscan

import (
	"encoding/binary"
	"math/bits"
)

// MaxDepth is encoding/json's nesting limit: a document may nest this many
// containers, and the strict scanners refuse one more.
const MaxDepth = 10000

// Span is a half-open byte range [Start, End) of the scanned input.
type Span struct{ Start, End int }

// Of returns the bytes of b the span covers.
func (s Span) Of(b []byte) []byte { return b[s.Start:s.End] }

// SkipSpace returns the index of the first byte at or after i that is not
// JSON whitespace (len(b) when there is none).
func SkipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

// Valid reports whether b is one JSON value with optional surrounding
// whitespace: the verdict of encoding/json.Valid, without its allocations.
func Valid(b []byte) bool {
	i := SkipSpace(b, 0)
	end, ok := ScanValue(b, i)
	return ok && SkipSpace(b, end) == len(b)
}

// ScanValue validates the value starting at b[i] and returns the index just
// past it.
func ScanValue(b []byte, i int) (end int, ok bool) { return ScanNested(b, i, 0) }

// ScanNested is ScanValue for a value already inside depth containers, so
// the nesting limit counts from the top of the document.
func ScanNested(b []byte, i, depth int) (end int, ok bool) {
	if i >= len(b) {
		return 0, false
	}
	switch c := b[i]; {
	case c == '"':
		end, _, ok := ScanString(b, i)
		return end, ok
	case c == '{' || c == '[':
		return scanContainer(b, i, depth)
	case c == 't':
		return scanLiteral(b, i, "true")
	case c == 'f':
		return scanLiteral(b, i, "false")
	case c == 'n':
		return scanLiteral(b, i, "null")
	case c == '-' || isDigit(c):
		return ScanNumber(b, i)
	}
	return 0, false
}

// scanContainer validates the object or array opening at b[i]. It steps
// its entries in line rather than through Step: validation runs over every
// byte of a body, and a call per entry shows on small ones.
func scanContainer(b []byte, i, depth int) (int, bool) {
	if depth >= MaxDepth {
		return 0, false
	}
	closing := byte(']')
	if b[i] == '{' {
		closing = '}'
	}
	i = SkipSpace(b, i+1)
	if i < len(b) && b[i] == closing {
		return i + 1, true
	}
	for {
		var ok bool
		if closing == '}' {
			if i >= len(b) || b[i] != '"' {
				return 0, false
			}
			if i, _, ok = ScanString(b, i); !ok {
				return 0, false
			}
			i = SkipSpace(b, i)
			if i >= len(b) || b[i] != ':' {
				return 0, false
			}
			i = SkipSpace(b, i+1)
		}
		if i, ok = ScanNested(b, i, depth+1); !ok {
			return 0, false
		}
		i = SkipSpace(b, i)
		if i >= len(b) {
			return 0, false
		}
		switch b[i] {
		case ',':
			i = SkipSpace(b, i+1)
		case closing:
			return i + 1, true
		default:
			return 0, false
		}
	}
}

// Step moves to element n of the object or array whose opening bracket ends
// just before b[i]: past the separating comma when n > 0, or past closing
// (done) when the container ends there. It returns the index of the element
// (or just past the container) with whitespace skipped. Every container walk
// of the package steps with it, so separators are handled in one place.
func Step(b []byte, i, n int, closing byte) (pos int, done, ok bool) {
	i = SkipSpace(b, i)
	if i < len(b) && b[i] == closing {
		return i + 1, true, true
	}
	if n > 0 {
		if i >= len(b) || b[i] != ',' {
			return i, false, false
		}
		i = SkipSpace(b, i+1)
	}
	return i, false, i < len(b)
}

// ScanString validates the string starting at b[i] (a quote) and returns the
// index just past its closing quote and whether it holds a backslash escape.
// The hot loop tests 8 bytes at a time (32 while they are plain): prompts
// are long runs of plain text. A word holding a special byte jumps straight
// to it, so an escape every few dozen bytes (\n, \" in code and JSON
// pasted into agent prompts) costs no byte-by-byte walk up to it.
func ScanString(b []byte, i int) (end int, escaped, ok bool) {
	i++
	for {
	words:
		for i+8 <= len(b) {
			if m := specials(binary.LittleEndian.Uint64(b[i:])); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break words
			}
			i += 8
			// A plain word: four words per test while none holds a special
			// byte, one branch per 32 bytes. Only after a plain word, so
			// text dense with escapes does not pay for a wide test that
			// fails.
			for i+32 <= len(b) {
				w := b[i : i+32]
				if specials(binary.LittleEndian.Uint64(w))|specials(binary.LittleEndian.Uint64(w[8:]))|
					specials(binary.LittleEndian.Uint64(w[16:]))|specials(binary.LittleEndian.Uint64(w[24:])) != 0 {
					break
				}
				i += 32
			}
		}
		if i >= len(b) {
			return 0, false, false
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, escaped, true
		case c == '\\':
			// The escape is checked in line: prompts carry one every few
			// dozen bytes (\n, \", \u00e9), and a call per escape shows.
			escaped = true
			if i+1 >= len(b) {
				return 0, false, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+5 >= len(b) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					return 0, false, false
				}
				i += 6
			default:
				return 0, false, false
			}
		case c < 0x20:
			return 0, false, false
		default:
			i++ // the last few bytes, fewer than a word
		}
	}
}

// specials flags the bytes of the little-endian word x that are '"',
// '\\' or a control character (< 0x20): the bytes a string scan must stop
// at. Bit 8k+7 is set for flagged byte k, so several words can be tested
// with one branch and the first special byte found by its trailing zeros.
// Classic SWAR zero-byte tests: a byte above a special one may be flagged
// too, but never one below it and never when there is none, so the lowest
// flag is exactly the first special byte.
func specials(x uint64) uint64 {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	q := x ^ (lo * '"')
	bs := x ^ (lo * '\\')
	return ((q-lo)&^q | (bs-lo)&^bs | (x-lo*0x20)&^x) & hi
}

func scanLiteral(b []byte, i int, lit string) (int, bool) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return 0, false
	}
	return i + len(lit), true
}

// ScanNumber validates the number at b[i] (RFC 8259's grammar) and returns
// the index just past it.
func ScanNumber(b []byte, i int) (end int, ok bool) {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i)
	default:
		return 0, false
	}
	if i < len(b) && b[i] == '.' {
		if i+1 >= len(b) || !isDigit(b[i+1]) {
			return 0, false
		}
		i = digits(b, i+1)
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return 0, false
		}
		i = digits(b, i)
	}
	return i, true
}

func digits(b []byte, i int) int {
	for i < len(b) && isDigit(b[i]) {
		i++
	}
	return i
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
