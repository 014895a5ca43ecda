package bpe

import (
	"unicode"
	"unicode/utf8"
)

// The Split patterns of the Qwen 2/3 and Llama 3 tokenizers (cl100k
// family), which differ only in how many digits one piece holds.
const (
	patternQwen   = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patternLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// scanner is a hand-written matcher of one known pattern: the backtracking
// regex engine costs most of a tokenisation, and these patterns are
// simple enough to scan in one pass. scan_test.go checks it against
// regexp2 on the parity corpus and a fuzz corpus.
type scanner struct {
	maxDigits int
}

// scannerFor returns the scanner of a known pattern.
func scannerFor(pattern string) (scanner, bool) {
	switch pattern {
	case patternQwen:
		return scanner{maxDigits: 1}, true
	case patternLlama3:
		return scanner{maxDigits: 3}, true
	}
	return scanner{}, false
}

func isL(r rune) bool { return unicode.IsLetter(r) }
func isN(r rune) bool { return unicode.IsNumber(r) }
func isS(r rune) bool { return unicode.IsSpace(r) }

// asciiLetter is isL of every ASCII byte, so a run of letters (most of a
// prompt's words) is scanned without decoding or a Unicode table per byte.
var asciiLetter = func() (t [utf8.RuneSelf]bool) {
	for c := range t {
		t[c] = isL(rune(c))
	}
	return t
}()

// letters returns the byte length of the longest prefix of s whose runes
// are letters: sc.run(s, isL), with ASCII looked up in asciiLetter.
func letters(s string) int {
	n := 0
	for n < len(s) {
		if c := s[n]; c < utf8.RuneSelf {
			if !asciiLetter[c] {
				break
			}
			n++
			continue
		}
		r, w := utf8.DecodeRuneInString(s[n:])
		if !isL(r) {
			break
		}
		n += w
	}
	return n
}

// split appends the Isolated pieces of s (the pattern matches every
// character, so there are no gaps).
func (sc scanner) split(s string, out []string) []string {
	for i := 0; i < len(s); {
		n := sc.match(s[i:])
		out = append(out, s[i:i+n])
		i += n
	}
	return out
}

// at decodes the rune at s[i:] (utf8.RuneError, 0 at the end).
func at(s string, i int) (rune, int) {
	if i >= len(s) {
		return utf8.RuneError, 0
	}
	if s[i] < utf8.RuneSelf {
		return rune(s[i]), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// match returns the byte length of the pattern's match at the start of s,
// trying the alternatives in order as the regex does.
func (sc scanner) match(s string) int {
	r0, w0 := at(s, 0)
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if r0 == '\'' && len(s) > 1 {
		c1 := s[1] | 0x20
		switch c1 {
		case 's', 't', 'm', 'd':
			return 2
		}
		if len(s) > 2 {
			c2 := s[2] | 0x20
			if (c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l') {
				return 3
			}
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if isL(r0) {
		return w0 + letters(s[w0:])
	}
	if r0 != '\r' && r0 != '\n' && !isN(r0) {
		if r1, _ := at(s, w0); isL(r1) {
			return w0 + letters(s[w0:])
		}
	}
	// \p{N}{1,k}
	if isN(r0) {
		n := w0
		for k := 1; k < sc.maxDigits; k++ {
			r, w := at(s, n)
			if w == 0 || !isN(r) {
				break
			}
			n += w
		}
		return n
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	other := func(r rune) bool { return !isS(r) && !isL(r) && !isN(r) }
	start := 0
	if r1, _ := at(s, 1); r0 == ' ' && other(r1) {
		start = 1
	}
	if r, w := at(s, start); w > 0 && other(r) {
		n := start + sc.run(s[start:], other)
		for n < len(s) && (s[n] == '\r' || s[n] == '\n') {
			n++
		}
		return n
	}
	// Whitespace: \s*[\r\n]+ | \s+(?!\S) | \s+
	if isS(r0) {
		end, lastNL := 0, -1
		for end < len(s) {
			r, w := at(s, end)
			if !isS(r) {
				break
			}
			if r == '\r' || r == '\n' {
				lastNL = end
			}
			end += w
		}
		if lastNL >= 0 {
			return lastNL + 1
		}
		if end == len(s) {
			return end
		}
		// Give the last whitespace rune back to the next piece when the
		// run has more than one.
		_, lw := utf8.DecodeLastRuneInString(s[:end])
		if end-lw > 0 {
			return end - lw
		}
		return end
	}
	return w0 // unreachable for valid patterns: every rune is covered
}

// run returns the byte length of the longest prefix of s whose runes
// satisfy f.
func (sc scanner) run(s string, f func(rune) bool) int {
	n := 0
	for n < len(s) {
		r, w := at(s, n)
		if !f(r) {
			break
		}
		n += w
	}
	return n
}
