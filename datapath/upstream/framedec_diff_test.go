package upstream

import (
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
)

// framePieces are the bits hostile or broken engines send in chunked
// framing: sizes with leading zeros and at the 16-digit bound, extensions,
// stray CR and LF, trailers and bytes past the end.
var framePieces = []string{
	"0", "1", "3", "a", "F", "00", "0000000000000003", "00000000000000003",
	"ffffffffffffffff", "1ffffffffffffffff", "\r\n", "\n", "\r", ";", ";x=1",
	" ", "\t", "abc", "data: t\n\n", "X-T: 1\r\n", "HTTP/1.1 200 OK\r\n", "g",
}

// TestFrameDecoderDifferential builds bodies from framePieces (seeded, so a
// failure repeats) and checks the pushed decoder against the pulled reader
// over random splits: whatever the pulled reader decodes completely the
// decoder decodes the same, with the same bytes left over; whatever it
// rejects the decoder does not end cleanly.
func TestFrameDecoderDifferential(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	valid := []string{"3\r\nabc\r\n", "1;e\r\nx\r\n", "a\r\n0123456789\r\n"}
	for i := range 20000 {
		var sb strings.Builder
		for range 1 + rng.IntN(3) {
			sb.WriteString(valid[rng.IntN(len(valid))])
		}
		for range rng.IntN(8) {
			sb.WriteString(framePieces[rng.IntN(len(framePieces))])
		}
		if rng.IntN(2) == 0 {
			sb.WriteString("0\r\n\r\n")
		}
		raw := sb.String()
		wantData, wantErr, wantRest := pullChunked(raw)
		for range 4 {
			var cuts []int
			for k := 1; k < len(raw); k++ {
				if rng.IntN(4) == 0 {
					cuts = append(cuts, k)
				}
			}
			data, done, extra, err := decodeAll(frameChunked, 0, raw, cuts)
			switch {
			case wantErr == nil:
				if err != nil || !done || data != wantData || extra != wantRest {
					t.Fatalf("#%d %q cuts %v: done=%v data %q extra %d err %v; reader: %q rest %d", i, raw, cuts, done, data, extra, err, wantData, wantRest)
				}
			case errors.Is(wantErr, io.ErrUnexpectedEOF):
				if done { // an error is fine: the decoder may reject a prefix early
					t.Fatalf("#%d %q cuts %v: ended with %q; reader wants more (%v)", i, raw, cuts, data, wantErr)
				}
			default:
				if err == nil && done {
					t.Fatalf("#%d %q cuts %v: ended cleanly with %q; reader: %v", i, raw, cuts, data, wantErr)
				}
				if err != nil && data != wantData { // what came before the bad framing is relayed, as the Read path does
					t.Fatalf("#%d %q cuts %v: %q before %v; reader: %q before %v", i, raw, cuts, data, err, wantData, wantErr)
				}
			}
		}
	}
}

// TestFrameDecoderDataBeforeError: the body bytes before bad framing in
// the same push are handed on with the error, as the Read path hands them
// on before it fails.
func TestFrameDecoderDataBeforeError(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{"3\r\nabc\r\n10000000000000000\r\n", "abc"},
		{"3\r\nabc\r\n3\r\nxyzw\r\n", "abcxyz"}, // the chunk's data, then its missing CRLF
		{"3\r\nabc\r\nzz\r\n", "abc"},
	} {
		pulled, perr, _ := pullChunked(tc.raw)
		d := frameDecoder{kind: frameChunked}
		data, done, _, err := d.decode([]byte(tc.raw))
		if err == nil || done || string(data) != tc.want || perr == nil || pulled != tc.want {
			t.Errorf("%q: data %q done=%v err %v (Read path: %q, %v); want %q and an error", tc.raw, data, done, err, pulled, perr, tc.want)
		}
	}
}

// FuzzFrameDecoder checks, on any bytes, the decoder pushed them whole
// (where wholeChunk takes plain chunks in one step) against the decoder
// pushed them one byte at a time (never wholeChunk: every chunk is split)
// and against the pulled reader: the same data, end and error, and after
// a clean end the same bytes left over.
func FuzzFrameDecoder(f *testing.F) {
	f.Add("c\r\ndata: tok0\n\n\r\n0\r\n\r\n")
	f.Add("3\r\nabc\r\n3;x\r\nabc\r\n0\r\nX: 1\r\n\r\nextra")
	for _, p := range framePieces {
		f.Add("3\r\nabc\r\n" + p + "0\r\n\r\n")
	}
	f.Fuzz(func(t *testing.T, raw string) {
		every := make([]int, 0, len(raw))
		for k := 1; k < len(raw); k++ {
			every = append(every, k)
		}
		wd, wdone, wextra, werr := decodeAll(frameChunked, 0, raw, nil)
		bd, bdone, bextra, berr := decodeAll(frameChunked, 0, raw, every)
		if wd != bd || wdone != bdone || (werr == nil) != (berr == nil) || werr == nil && wextra != bextra {
			t.Fatalf("%q: whole %q %v %d %v; byte by byte %q %v %d %v", raw, wd, wdone, wextra, werr, bd, bdone, bextra, berr)
		}
		pd, perr, prest := pullChunked(raw)
		if perr == nil && (werr != nil || !wdone || wd != pd || wextra != prest) {
			t.Fatalf("%q: whole %q %v %d %v; reader %q rest %d", raw, wd, wdone, wextra, werr, pd, prest)
		}
	})
}

// TestWholeChunk: the one-step path takes only whole plain chunks and
// leaves the rest to the states.
func TestWholeChunk(t *testing.T) {
	for _, tc := range []struct {
		in        string
		at, n, nx int
		ok        bool
	}{
		{"3\r\nabc\r\n", 3, 3, 8, true},
		{"A\r\n0123456789\r\nrest", 3, 10, 15, true},
		{"0000000000000003\r\nabc\r\n", 18, 3, 23, true},
		{"00000000000000003\r\nabc\r\n", 0, 0, 0, false}, // 17 digits
		{"0\r\n\r\n", 0, 0, 0, false},                    // the last chunk
		{"3;x\r\nabc\r\n", 0, 0, 0, false},
		{"3 \r\nabc\r\n", 0, 0, 0, false},
		{"3\nabc\r\n", 0, 0, 0, false},
		{"3\r\nabc\n", 0, 0, 0, false},
		{"3\r\nabc\r", 0, 0, 0, false},
		{"3\r\nab", 0, 0, 0, false},
		{"ffffffffffffffff\r\nabc\r\n", 0, 0, 0, false},
		{"g\r\n", 0, 0, 0, false},
		{"", 0, 0, 0, false},
	} {
		at, n, nx, ok := wholeChunk([]byte(tc.in), 0)
		if at != tc.at || n != tc.n || nx != tc.nx || ok != tc.ok {
			t.Errorf("%q: %d %d %d %v; want %d %d %d %v", tc.in, at, n, nx, ok, tc.at, tc.n, tc.nx, tc.ok)
		}
	}
}

// TestOneChunk: the whole-read path takes a read that is exactly one plain
// chunk and nothing else, and leaves every other read to decode's states.
func TestOneChunk(t *testing.T) {
	for _, tc := range []struct {
		in   string
		data string
		ok   bool
	}{
		{"3\r\nabc\r\n", "abc", true},
		{"A\r\n0123456789\r\n", "0123456789", true},
		{"c\r\ndata: tok0\n\n\r\n", "data: tok0\n\n", true},
		{"0000000000000003\r\nabc\r\n", "abc", true},
		{"00000000000000003\r\nabc\r\n", "", false}, // 17 digits
		{"A\r\n0123456789\r\nrest", "", false},      // bytes after it
		{"3\r\nabc\r\n3\r\nabc\r\n", "", false},     // two chunks
		{"4\r\nabc\r\n", "", false},                 // size over the data
		{"2\r\nabc\r\n", "", false},                 // size under the data
		{"0\r\n\r\n", "", false},                    // the last chunk
		{"3;x\r\nabc\r\n", "", false},
		{"3 \r\nabc\r\n", "", false},
		{"3\nabc\r\n", "", false},
		{"3\r\nabc\n\n", "", false},
		{"3\r\nabc\r", "", false},
		{"3\r\nab", "", false},
		{"ffffffffffffffff\r\nabc\r\n", "", false},
		{"g\r\n", "", false},
		{"\r\n\r\n", "", false},
		{"", "", false},
	} {
		data, ok := oneChunk([]byte(tc.in))
		if string(data) != tc.data || ok != tc.ok {
			t.Errorf("%q: %q %v; want %q %v", tc.in, data, ok, tc.data, tc.ok)
		}
	}
}

// TestHexValue: the table agrees with hexDigit on every byte.
func TestHexValue(t *testing.T) {
	if len(hexValue) != 256 {
		t.Fatalf("hexValue has %d entries", len(hexValue))
	}
	for b := range 256 {
		v, ok := hexDigit(byte(b))
		if got := hexValue[b]; ok && uint64(got) != v || !ok && got != 0xff {
			t.Errorf("%q: table %#x, hexDigit %d %v", byte(b), got, v, ok)
		}
	}
}
