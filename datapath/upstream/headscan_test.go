package upstream

import (
	"fmt"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"testing"
)

// TestHeadEndRecordsLines: the scan's recorded LF offsets are the head's,
// for as many lines as it keeps, whatever the line ends.
func TestHeadEndRecordsLines(t *testing.T) {
	for _, tc := range []struct {
		name, raw string
		n, lines  int
	}{
		{"CRLF", "HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\n\r\nbody", 31, 4},
		{"LF", "HTTP/1.1 200 OK\nA: 1\n\nbody", 22, 3},
		{"LF empty line after CRLF fields", "HTTP/1.1 200 OK\r\nA: 1\r\n\nbody", 24, 3},
		{"empty status line is not the end", "\r\nA: 1\r\n\r\n", 10, 3},
		{"no fields", "HTTP/1.1 204 No Content\r\n\r\n", 27, 2},
		{"not whole", "HTTP/1.1 200 OK\r\nA: 1\r\n", 0, 0},
		{"past the record", "HTTP/1.1 200 OK\r\n" + strings.Repeat("A: 1\r\n", maxLineEnds+2) + "\r\n", 17 + 6*(maxLineEnds+2) + 2, maxLineEnds + 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ends [maxLineEnds]int
			n, lines := headEnd([]byte(tc.raw), &ends)
			if n != tc.n || lines != tc.lines {
				t.Fatalf("headEnd = %d, %d; want %d, %d", n, lines, tc.n, tc.lines)
			}
			for k, at := 0, -1; k < min(lines-1, maxLineEnds); k++ {
				at += 1 + strings.IndexByte(tc.raw[at+1:], '\n')
				if ends[k] != at {
					t.Fatalf("line %d ends at %d, recorded %d", k, at, ends[k])
				}
			}
		})
	}
}

// TestReadResponseLongHeads: heads with more lines than the scan records
// (maxLineEnds), whose later lines the parse finds by a search, read as
// the old parser reads them: framing fields, a repeated Content-Length and
// a bad line on either side of the record's end.
func TestReadResponseLongHeads(t *testing.T) {
	fill := func(n int) string {
		var sb strings.Builder
		for i := range n {
			fmt.Fprintf(&sb, "X-F%d: v%d\r\n", i, i)
		}
		return sb.String()
	}
	for _, fields := range []int{maxLineEnds - 3, maxLineEnds - 2, maxLineEnds - 1, maxLineEnds, maxLineEnds + 5, 3 * maxLineEnds} {
		for _, last := range []string{
			"Content-Length: 2\r\n", "Transfer-Encoding: chunked\r\n", "Content-Length: 2\r\nContent-Length: 3\r\n",
			"Connection: close\r\n", "x-request-id: e\r\n", "no colon\r\n", "a b: v\r\n", "Odd: \t v \t\n",
		} {
			raw := "HTTP/1.1 200 OK\r\n" + fill(fields) + last + "\r\n2\r\nok\r\n0\r\n\r\nok"
			compareReadResponse(t, fmt.Sprintf("%d fields, then %q", fields, last), raw, http.MethodPost)
		}
	}
}

// TestParseStatusLine: the status line reads as strings.Cut,
// http.ParseHTTPVersion and strconv.Atoi read it, on HTTP/1.1 and
// HTTP/1.0 (compared whole) and on anything else.
func TestParseStatusLine(t *testing.T) {
	for _, line := range []string{
		"HTTP/1.1 200 OK", "HTTP/1.0 200 OK", "HTTP/1.1 200", "HTTP/1.0 503", "HTTP/1.1 204 No Content",
		"HTTP/1.1 200OK", "HTTP/1.1  200 OK", "HTTP/1.1 2x0 OK", "HTTP/1.1 099 Low", "HTTP/1.1 +20 Sign",
		"HTTP/1.1 -20 Sign", "HTTP/1.1 20", "HTTP/1.1 ", "HTTP/1.1", "HTTP/1.2 200 OK", "HTTP/2.0 200 OK",
		"HTTP/1.10 200 OK", "HTTP/1.1\t200 OK", "http/1.1 200 OK", "HTTP/1.1 999 Max", "HTTP/1.1 100 Continue",
		"HTTP/0.9 200 OK", "ICY 200 OK", "", " 200 OK", "HTTP/1.1 2000 Long",
	} {
		var got http.Response
		ok := parseStatusLine(&got, line)
		var want http.Response
		wantOK := func() bool {
			proto, status, ok := strings.Cut(line, " ")
			major, minor, vok := http.ParseHTTPVersion(proto)
			if !ok || !vok || len(status) < 3 || len(status) > 3 && status[3] != ' ' {
				return false
			}
			code, err := strconv.Atoi(status[:3])
			if err != nil || code < 100 {
				return false
			}
			want.Status, want.StatusCode, want.Proto, want.ProtoMajor, want.ProtoMinor = status, code, proto, major, minor
			return true
		}()
		if ok != wantOK || got.Status != want.Status || got.StatusCode != want.StatusCode ||
			got.Proto != want.Proto || got.ProtoMajor != want.ProtoMajor || got.ProtoMinor != want.ProtoMinor {
			t.Errorf("%q: %v %q %d %q %d.%d; want %v %q %d %q %d.%d", line,
				ok, got.Status, got.StatusCode, got.Proto, got.ProtoMajor, got.ProtoMinor,
				wantOK, want.Status, want.StatusCode, want.Proto, want.ProtoMajor, want.ProtoMinor)
		}
	}
}

// TestTokenCanonicalEveryShortName: the table walk agrees with
// validHeaderKey and textproto.CanonicalMIMEHeaderKey on every name of up
// to two bytes, and on three-byte names of the bytes where case and
// hyphens matter.
func TestTokenCanonicalEveryShortName(t *testing.T) {
	check := func(k string) {
		valid, canonical := tokenCanonical(k)
		wantCanonical := textproto.CanonicalMIMEHeaderKey(k) == k
		if valid != validHeaderKey(k) || valid && canonical != wantCanonical {
			t.Fatalf("tokenCanonical(%q) = %v, %v; want %v, %v", k, valid, canonical, validHeaderKey(k), wantCanonical)
		}
	}
	check("")
	for a := range 256 {
		check(string([]byte{byte(a)}))
		for b := range 256 {
			check(string([]byte{byte(a), byte(b)}))
		}
	}
	const some = "-aAzZ09_!~:@ \x00\x7f\x80\xff"
	for _, a := range []byte(some) {
		for _, b := range []byte(some) {
			for _, c := range []byte(some) {
				check(string([]byte{a, b, c}))
			}
		}
	}
}

// TestTrimOWS: the value without the spaces and tabs around it, the
// usual value's shortcut or not.
func TestTrimOWS(t *testing.T) {
	for _, v := range []string{
		"", " ", "  ", "\t", "a", " a", "  a", " a ", " a\t", "\ta", " \ta", " ab", " a b", " a b ",
		" \x01", " a\x01", " \x7f", " \x80", "a ", " a  ", " \u00e9",
	} {
		if got, want := trimOWS(v), strings.Trim(v, " \t"); got != want {
			t.Errorf("trimOWS(%q) = %q, want %q", v, got, want)
		}
	}
}

// BenchmarkHeadEnd is the scan of the fake engine's answer head alone.
func BenchmarkHeadEnd(b *testing.B) {
	raw := []byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: application/json\r\nX-Fake-Engine: fake\r\nX-Request-Id: 0123456789abcdef0123456789abcdef\r\nDate: Fri, 04 Dec 2026 03:28:57 GMT\r\n\r\n{}")
	var ends [maxLineEnds]int
	for b.Loop() {
		if n, _ := headEnd(raw, &ends); n == 0 {
			b.Fatal("no head")
		}
	}
}
