package bpe

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/text/unicode/norm"
)

// scanCorpus is the parity corpus plus generated strings that stress the
// alternatives' order: contractions, runs of each class, mixed whitespace.
func scanCorpus(t testing.TB) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "corpus.json"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	atoms := []string{"'s", "'S", "'re", "'RE", "'ll", "'x", "'", "a", "Zé", "中", "1", "٣", "12345", " ", "  ", "\t", "\n", "\r\n", "\u3000", "\u00a0",
		"!", "?!", "…", "😀", "-", ".", "_", "\u200b", "\u0301", "x\n", " \n ", "${", "//"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		var b strings.Builder
		for range 1 + rng.IntN(12) {
			b.WriteString(atoms[rng.IntN(len(atoms))])
		}
		out = append(out, b.String())
	}
	return out
}

// TestScannerMatchesRegex: the hand-written scanners split exactly like
// the regex engine for both patterns.
func TestScannerMatchesRegex(t *testing.T) {
	corpus := scanCorpus(t)
	for _, pat := range []string{patternQwen, patternLlama3} {
		sc, ok := scannerFor(pat)
		if !ok {
			t.Fatal("no scanner")
		}
		re, err := compile(pat)
		if err != nil {
			t.Fatal(err)
		}
		bad := 0
		for _, s := range corpus {
			want := splitIsolated(re, s, nil, false)
			if got := sc.split(s, nil); !slices.Equal(got, want) && bad < 5 {
				bad++
				t.Errorf("digits %d, %q:\n got %q\nwant %q", sc.maxDigits, s, got, want)
			}
		}
	}
}

func BenchmarkPreTokenize(b *testing.B) {
	s := strings.Repeat("The gateway routes each prompt — 3.14159, naïve café; func f(x int) { return x*2 }\n", 12)
	sc, _ := scannerFor(patternQwen)
	re, _ := compile(patternQwen)
	b.Run("scanner", func(b *testing.B) {
		for range b.N {
			sc.split(s, nil)
		}
	})
	b.Run("regexp2", func(b *testing.B) {
		for range b.N {
			splitIsolated(re, s, nil, false)
		}
	})
}

// letters is run(isL) with an ASCII table: the same length on the corpus,
// on every ASCII byte, and on invalid UTF-8.
func TestLettersMatchesRun(t *testing.T) {
	cases := scanCorpus(t)
	for c := range 128 {
		cases = append(cases, string(rune(c))+"ab", "ab"+string(rune(c)))
	}
	cases = append(cases, "ab\xffcd", "\xc3", "é\xc3", "abc")
	for _, s := range cases {
		for i := range len(s) {
			if got, want := letters(s[i:]), (scanner{}).run(s[i:], isL); got != want {
				t.Fatalf("letters(%q) = %d, run(isL) = %d", s[i:], got, want)
			}
		}
	}
}

// isASCII agrees with a byte-by-byte check at every length around its
// eight-byte steps and with a non-ASCII byte at every position.
func TestIsASCII(t *testing.T) {
	slow := func(s string) bool {
		for i := 0; i < len(s); i++ {
			if s[i] >= 0x80 {
				return false
			}
		}
		return true
	}
	cases := []string{"", "a", "\x7f", "\x80", "é", "ascii only", "exactly8", "exactly16bytes!!", "café au lait, seventeen+", strings.Repeat("x", 64) + "中"}
	base := strings.Repeat("abcdefgh", 3)
	for n := 0; n <= len(base); n++ {
		cases = append(cases, base[:n])
		for i := 0; i < n; i++ {
			b := []byte(base[:n])
			b[i] = 0xc3
			cases = append(cases, string(b))
		}
	}
	for _, s := range cases {
		if got, want := isASCII(s), slow(s); got != want {
			t.Errorf("isASCII(%q) = %v, want %v", s, got, want)
		}
	}
}

// TestASCIIIsNFC holds the ASCII fast path's premise against the
// normaliser in use: every ASCII byte, control characters included, alone
// and next to every other (NFC composes pairs), is already in NFC, and
// isASCII tells every byte value apart at every offset of its eight-byte
// step and of the tail.
func TestASCIIIsNFC(t *testing.T) {
	for a := range 0x80 {
		for b := range 0x80 {
			s := string([]byte{byte(a), byte(b)})
			if !norm.NFC.IsNormalString(s) || norm.NFC.String(s) != s {
				t.Fatalf("%q is ASCII but not in NFC", s)
			}
		}
	}
	for n := 1; n <= 19; n++ {
		b := []byte(strings.Repeat("a", n))
		for at := range n {
			for c := range 256 {
				b[at] = byte(c)
				if got, want := isASCII(string(b)), c < 0x80; got != want {
					t.Fatalf("isASCII with %#x at %d of %d = %v, want %v", c, at, n, got, want)
				}
			}
			b[at] = 'a'
		}
	}
}
