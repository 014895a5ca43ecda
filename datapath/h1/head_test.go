package h1

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"
)

// TestBufferedHead holds the one-pass measure of a buffered head to the
// scan: where it takes a head, the scan reads the same bytes; where it
// declines, the scan decides.
func TestBufferedHead(t *testing.T) {
	const wrk = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n"
	tests := []struct {
		name, raw string
		bufSize   int // 0: readBufSize
		maxHead   int // Server.MaxHeaderBytes
		want      int // bufferedHead's length; 0: declined
	}{
		{"whole", wrk, 0, 0, len(wrk)},
		{"with its body", wrk + "{}", 0, 0, len(wrk)},
		{"with the next request", wrk + "{}" + wrk, 0, 0, len(wrk)},
		{"cut short", wrk[:len(wrk)-2], 0, 0, 0},
		{"empty", "", 0, 0, 0},
		{"leading CRLF", "\r\n" + wrk, 0, 0, 0},
		{"bare LF request line", "GET / HTTP/1.1\nHost: x\r\n\r\n", 0, 0, 0},
		{"bare LF field", "GET / HTTP/1.1\r\nA: b\nHost: x\r\n\r\n", 0, 0, 0},
		{"bare LF end", "GET / HTTP/1.1\r\nHost: x\r\n\n", 0, 0, 0},
		{"at MaxHeaderBytes", wrk, 0, len(wrk), len(wrk)},
		{"past MaxHeaderBytes", wrk, 0, len(wrk) - 1, 0},
		{"line at MaxLine", "GET /" + strings.Repeat("a", MaxLine-len("GET / HTTP/1.1")) + " HTTP/1.1\r\nHost: x\r\n\r\n", 2 * MaxLine, 4 * MaxLine, MaxLine + len("\r\nHost: x\r\n\r\n")},
		{"line past MaxLine", "GET /" + strings.Repeat("a", MaxLine) + " HTTP/1.1\r\nHost: x\r\n\r\n", 2 * MaxLine, 4 * MaxLine, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			size := tc.bufSize
			if size == 0 {
				size = readBufSize
			}
			newConn := func() *conn {
				return &conn{srv: &Server{MaxHeaderBytes: tc.maxHead}, br: bufio.NewReaderSize(strings.NewReader(tc.raw), size)}
			}
			c := newConn()
			_, _ = c.br.Peek(1) // the socket's read
			whole := c.bufferedHead()
			if n := len(whole); n != tc.want {
				t.Fatalf("bufferedHead %d, want %d", n, tc.want)
			}
			if whole == nil {
				return
			}
			got := c.readBufferedHead(whole, false)
			rest := c.br.Buffered()
			s := newConn()
			want, err := s.readHead(false)
			if err != nil || got != want || rest != s.br.Buffered() {
				t.Errorf("took %q leaving %d; the scan reads %q (%v) leaving %d", got, rest, want, err, s.br.Buffered())
			}
		})
	}
}

// TestInternTable holds every common name to a slot of its own, in both
// spellings, and other spellings to the canonicaliser.
func TestInternTable(t *testing.T) {
	for _, k := range commonRequestHeaders {
		for _, name := range []string{k, strings.ToLower(k)} {
			if got, _, ok := internKey(name); !ok || got != k {
				t.Errorf("internKey(%q) = %q, %v; want %q", name, got, ok, k)
			}
		}
	}
	for _, name := range []string{"content-Type", "HOST", "X-Other", "Hos", "Content-Lengthx", "x", ""} {
		if got, _, ok := internKey(name); ok {
			t.Errorf("internKey(%q) = %q, want none", name, got)
		}
	}
}

// TestFieldLineRefusals names why each malformed field line is refused,
// as the parser checked them one by one before it read a name and its
// colon in one pass.
func TestFieldLineRefusals(t *testing.T) {
	tests := []struct{ line, want string }{
		{" a: b", "obsolete line folding"},
		{"\ta: b", "obsolete line folding"},
		{": b", "malformed header line"},
		{"ab", "malformed header line"},
		{"a b: c", "invalid header name"},
		{"a(b: c", "invalid header name"},
		{"a\x00: b", "invalid header name"},
		{"a: b\x01", "invalid byte in header value"},
		{"a: b\x7f", "invalid byte in header value"},
		{"a: b\rc", "invalid byte in header value"},
	}
	for _, tc := range tests {
		t.Run(tc.line, func(t *testing.T) {
			r := &http.Request{URL: &url.URL{}}
			var vals [16]string
			_, err := parseRequest("GET / HTTP/1.1\r\nHost: x\r\n"+tc.line+"\r\n\r\n", nil, r, vals[:], nil)
			if err == nil || err.Error() != tc.want || statusOf(err) != http.StatusBadRequest {
				t.Errorf("got %v, want 400 %q", err, tc.want)
			}
		})
	}
}

// TestManyFields covers heads past the values' backing array and the
// field cap.
func TestManyFields(t *testing.T) {
	head := func(n int, dup bool) string {
		var b strings.Builder
		b.WriteString("GET / HTTP/1.1\r\nHost: x\r\n")
		for i := range n {
			if dup && i%2 == 1 {
				fmt.Fprintf(&b, "X-F%d: w\r\n", i-1)
				continue
			}
			fmt.Fprintf(&b, "X-F%d: v\r\n", i)
		}
		return b.String() + "\r\n"
	}
	tests := []struct {
		name   string
		n      int
		dup    bool
		fields int // 0: refused with 431
	}{
		{"16", 16, false, 16},
		{"17", 17, false, 17},
		{"40", 40, false, 40},
		{"40 in pairs", 40, true, 20},
		{"256", 256, false, 256},
		{"257", 257, false, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &http.Request{URL: &url.URL{}}
			var vals [16]string
			_, err := parseRequest(head(tc.n, tc.dup), nil, r, vals[:], nil)
			if tc.fields == 0 {
				if statusOf(err) != http.StatusRequestHeaderFieldsTooLarge {
					t.Fatalf("got %v, want 431", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Header) != tc.fields {
				t.Fatalf("%d fields, want %d", len(r.Header), tc.fields)
			}
			for i := 0; i < tc.n; i++ {
				want := []string{"v"}
				if tc.dup {
					if i%2 == 1 {
						continue
					}
					want = []string{"v", "w"}
				}
				if got := r.Header[fmt.Sprintf("X-F%d", i)]; strings.Join(got, ",") != strings.Join(want, ",") {
					t.Errorf("X-F%d = %q, want %q", i, got, want)
				}
			}
		})
	}
}

// TestRepeatedFields: a name met again, in any spelling, adds a value to
// the first one's field, whether it is a common name (kept in the
// parser's set of slots) or not (looked up in the map).
func TestRepeatedFields(t *testing.T) {
	tests := []struct {
		name   string
		fields string
		key    string
		want   []string
		n      int // fields in the map
	}{
		{"common, one spelling", "Accept: a\r\nAccept: b\r\n", "Accept", []string{"a", "b"}, 1},
		{"common, three spellings", "Content-Type: a\r\ncontent-type: b\r\nCONTENT-TYPE: c\r\n", "Content-Type", []string{"a", "b", "c"}, 1},
		{"common, odd spelling first", "aCCEPT: a\r\nAccept: b\r\n", "Accept", []string{"a", "b"}, 1},
		{"other", "X-Other: a\r\nx-other: b\r\n", "X-Other", []string{"a", "b"}, 1},
		{"common and other apart", "Accept: a\r\nX-Other: b\r\nAccept: c\r\n", "Accept", []string{"a", "c"}, 2},
		{"slot neighbours apart", "Te: a\r\nTrailer: b\r\n", "Te", []string{"a"}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &http.Request{URL: &url.URL{}}
			var vals [16]string
			_, err := parseRequest("GET / HTTP/1.1\r\nHost: x\r\n"+tc.fields+"\r\n", nil, r, vals[:], nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Header[tc.key]; strings.Join(got, "|") != strings.Join(tc.want, "|") || len(r.Header) != tc.n {
				t.Errorf("%s = %q in %d fields, want %q in %d", tc.key, got, len(r.Header), tc.want, tc.n)
			}
		})
	}
}

// TestWordChecks holds the eight-bytes-at-a-time checks (the request's
// target, values and Host, the response's values) to their byte loops: every byte value at every place of strings around the word
// size, alone and after a HTAB (which the value check flags and then
// allows).
func TestWordChecks(t *testing.T) {
	refValue := func(v string) bool {
		for i := 0; i < len(v); i++ {
			if b := v[i]; (b < ' ' && b != '\t') || b == 0x7f {
				return false
			}
		}
		return true
	}
	refTarget := func(s string) bool {
		for i := 0; i < len(s); i++ {
			if b := s[i]; b <= ' ' || b == 0x7f {
				return false
			}
		}
		return true
	}
	for _, n := range []int{1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 24} {
		for _, prefix := range []string{"", "\t"} {
			for at := 0; at < n; at++ {
				for b := 0; b < 256; b++ {
					s := []byte(prefix + strings.Repeat("a", n))
					s[len(prefix)+at] = byte(b)
					if got, want := validFieldValue(string(s)), refValue(string(s)); got != want {
						t.Errorf("validFieldValue(%q) = %v, want %v", s, got, want)
					}
					if got, want := validTarget(string(s)), refTarget(string(s)); got != want {
						t.Errorf("validTarget(%q) = %v, want %v", s, got, want)
					}
					if got, want := needsScrub(string(s)), strings.ContainsAny(string(s), "\r\n\x00"); got != want {
						t.Errorf("needsScrub(%q) = %v, want %v", s, got, want)
					}
					for _, fill := range []byte{'a', '1', 'Z'} {
						h := bytes.Repeat([]byte{fill}, n)
						h[at] = byte(b)
						if got, want := validHost(string(h)), httpguts.ValidHostHeader(string(h)); got != want {
							t.Errorf("validHost(%q) = %v, want %v", h, got, want)
						}
					}
				}
			}
		}
	}
}
