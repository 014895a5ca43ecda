package h1

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// parseRaw runs the head reader and parser over raw as a connection would.
// A head bufferedHead measures is parsed twice, with its line ends and
// searching every line; an error (of no status) says how they differ.
func parseRaw(raw string) (*http.Request, parsed, error) {
	c := &conn{srv: &Server{}, br: bufio.NewReaderSize(strings.NewReader(raw), readBufSize)}
	_, _ = c.br.Peek(1)
	n := len(c.bufferedHead())
	head, err := c.readHead(true)
	if err != nil {
		return nil, parsed{}, err
	}
	r := &http.Request{URL: &url.URL{}}
	var vals [16]string
	p, err := parseRequest(head, nil, r, vals[:], nil)
	if n > 0 {
		if diff := parseDiff(head, c.ends.list(), r, p, err); diff != "" {
			return nil, parsed{}, errors.New(diff)
		}
	}
	return r, p, err
}

// parseDiff parses head again with line ends (as bufferedHead noted them)
// and says how the request, its facts or its error differ from those of
// the parse that searched every line (r, p, err); "" when they do not.
func parseDiff(head string, ends []uint16, r *http.Request, p parsed, err error) string {
	r2 := &http.Request{URL: &url.URL{}}
	var vals [16]string
	p2, err2 := parseRequest(head, ends, r2, vals[:], nil)
	if fmt.Sprint(err2) != fmt.Sprint(err) || statusOf(err2) != statusOf(err) {
		return fmt.Sprintf("with line ends %v: %v; searched: %v", ends, err2, err)
	}
	if err == nil && (p2 != p || r2.Method != r.Method || r2.RequestURI != r.RequestURI || r2.Proto != r.Proto ||
		r2.Host != r.Host || *r2.URL != *r.URL || r2.ContentLength != r.ContentLength || r2.Close != r.Close ||
		!maps.EqualFunc(r2.Header, r.Header, slices.Equal)) {
		return fmt.Sprintf("with line ends %v: %+v %+v; searched: %+v %+v", ends, p2, r2, p, r)
	}
	return ""
}

// TestTargetEnd holds the request target's one walk (targetEnd) to a byte
// loop: every byte value at every place of targets around the word size,
// in a head with fields after its request line and in one without.
func TestTargetEnd(t *testing.T) {
	ref := func(line string, from int) (int, bool) {
		sp := strings.IndexByte(line[from:], ' ')
		if sp < 0 {
			return -1, false
		}
		return from + sp, !strings.ContainsFunc(line[from:from+sp], func(c rune) bool {
			return c <= ' ' || c == 0x7f || c == '%' || c == '?'
		})
	}
	for _, n := range []int{1, 2, 7, 8, 9, 15, 16, 17, 24} {
		for _, tail := range []string{" HTTP/1.1\r\nHost: x\r\n\r\n", " HTTP/1.1\r\n\r\n", "\r\n\r\n"} {
			for at := 0; at < n; at++ {
				for b := 0; b < 256; b++ {
					s := []byte("/" + strings.Repeat("a", n-1))
					s[at] = byte(b)
					head := "GET " + string(s) + tail
					lineEnd := strings.IndexByte(head, '\r')
					wantSp, wantSimple := ref(head[:lineEnd], 4)
					if sp, simple := targetEnd(head, 4, lineEnd); sp != wantSp || simple != wantSimple {
						t.Fatalf("targetEnd(%q) = %d, %v; want %d, %v", head, sp, simple, wantSp, wantSimple)
					}
				}
			}
		}
	}
}

// TestRequestLine parses request lines whose method or target the one
// walk stops in, at each place around a word: each is refused with the
// error, or read as the request, that searching finds (parseRaw).
func TestRequestLine(t *testing.T) {
	tests := []struct {
		line, err, path, query string
	}{
		{line: "POST /v1/completions HTTP/1.1", path: "/v1/completions"},
		{line: "GET /abcdef HTTP/1.1", path: "/abcdef"},
		{line: "GET /abcdefghijklmno HTTP/1.1", path: "/abcdefghijklmno"},
		{line: "GET /a?b=1 HTTP/1.1", path: "/a", query: "b=1"},
		{line: "GET /abcdefghij? HTTP/1.1", path: "/abcdefghij"},
		{line: "GET /a%20b HTTP/1.1", path: "/a b"},
		{line: "GET http://h/x HTTP/1.1", path: "/x"},
		{line: "post / HTTP/1.1", err: "request method is not upper-case letters"},
		{line: "PO:ST / HTTP/1.1", err: "request method is not upper-case letters"},
		{line: "POST", err: "malformed request line"},
		{line: "POST/ HTTP/1.1", err: "malformed request line"},
		{line: "post/ HTTP/1.1", err: "malformed request line"},
		{line: " POST / HTTP/1.1", err: "malformed request line"},
		{line: "POST  / HTTP/1.1", err: "malformed request line"},
		{line: "POST /", err: "malformed request line"},
		{line: "POST /abcdefghijklmnop", err: "malformed request line"},
		{line: "post /", err: "malformed request line"},
		{line: "POST * HTTP/1.1", err: "asterisk-form request target"},
		{line: "POST /a\tb HTTP/1.1", err: "request target contains whitespace or a control byte"},
		{line: "POST /abcdefgh\x7f HTTP/1.1", err: "request target contains whitespace or a control byte"},
		{line: "POST /a%\x01 HTTP/1.1", err: "request target contains whitespace or a control byte"},
		{line: "POST /a HTTP/1.1 ", err: "malformed HTTP version"},
		{line: "POST /a b HTTP/1.1", err: "malformed HTTP version"},
	}
	for _, tc := range tests {
		t.Run(tc.line, func(t *testing.T) {
			r, _, err := parseRaw(tc.line + "\r\nHost: x\r\n\r\n")
			if fmt.Sprint(err) != cmp.Or(tc.err, "<nil>") {
				t.Fatalf("error %v, want %q", err, tc.err)
			}
			if err == nil && (r.URL.Path != tc.path || r.URL.RawQuery != tc.query) {
				t.Errorf("path %q query %q, want %q %q", r.URL.Path, r.URL.RawQuery, tc.path, tc.query)
			}
		})
	}
}

func statusOf(err error) int {
	var re *requestError
	if errors.As(err, &re) {
		return re.status
	}
	return 0
}

func TestParseRequestRefuses(t *testing.T) {
	tests := []struct {
		name, raw string
		status    int
	}{
		{"CL and TE", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
		{"duplicate CL", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n", 400},
		{"CL list", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1,1\r\n\r\n", 400},
		{"CL sign", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +1\r\n\r\n", 400},
		{"CL empty", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: \r\n\r\n", 400},
		{"CL 19 digits", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000000000000\r\n\r\n", 400},
		{"TE gzip", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
		{"TE list", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
		{"TE twice", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
		{"TE on 1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
		{"obs-fold", "GET / HTTP/1.1\r\nHost: x\r\nA: b\r\n\tc\r\n\r\n", 400},
		{"bare LF request line", "GET / HTTP/1.1\nHost: x\r\n\r\n", 400},
		{"bare LF end", "GET / HTTP/1.1\r\nHost: x\r\n\n", 400},
		{"bare CR", "GET / HTTP/1.1\r\nHost: x\r\nA: b\rc\r\n\r\n", 400},
		{"DEL in value", "GET / HTTP/1.1\r\nHost: x\r\nA: b\x7f\r\n\r\n", 400},
		{"space before colon", "GET / HTTP/1.1\r\nHost: x\r\nA : b\r\n\r\n", 400},
		{"empty name", "GET / HTTP/1.1\r\nHost: x\r\n: b\r\n\r\n", 400},
		{"no Host", "GET / HTTP/1.1\r\n\r\n", 400},
		{"two Hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
		{"bad Host", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400},
		{"method not token", "G(T / HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"method lower case", "post / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", 400},
		{"method with a digit", "P0ST / HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"empty Host", "GET / HTTP/1.1\r\nHost:\r\n\r\n", 400},
		{"empty Host on 1.0", "GET / HTTP/1.0\r\nHost: \r\n\r\n", 400},
		{"asterisk-form", "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"double space", "GET  / HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"tab in target", "GET /a\tb HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"no version", "GET /\r\nHost: x\r\n\r\n", 400},
		{"lowercase version", "GET / http/1.1\r\nHost: x\r\n\r\n", 400},
		{"HTTP/2.0", "GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505},
		{"long request line", "GET /" + strings.Repeat("a", MaxLine) + " HTTP/1.1\r\nHost: x\r\n\r\n", 414},
		{"long header line", "GET / HTTP/1.1\r\nHost: x\r\nA: " + strings.Repeat("a", MaxLine) + "\r\n\r\n", 431},
		{"long head", "GET / HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("A: "+strings.Repeat("a", 1000)+"\r\n", 70) + "\r\n", 431},
		{"Expect other", "POST / HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\nContent-Length: 1\r\n\r\n", 417},
		{"bad escape", "GET /%zz HTTP/1.1\r\nHost: x\r\n\r\n", 400},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := parseRaw(tc.raw)
			if got := statusOf(err); got != tc.status {
				t.Errorf("status %d (%v), want %d", got, err, tc.status)
			}
		})
	}
}

func TestParseRequestAccepts(t *testing.T) {
	tests := []struct {
		name, raw string
		check     func(*http.Request, parsed) string
	}{
		{"origin form", "POST /v1/completions?x=1 HTTP/1.1\r\nHost: gw:80\r\ncontent-type: application/json\r\nContent-Length: 12\r\nX-Odd:  v \r\nX-Odd: w\r\n\r\n", func(r *http.Request, p parsed) string {
			switch {
			case r.Method != "POST" || r.URL.Path != "/v1/completions" || r.URL.RawQuery != "x=1" || r.RequestURI != "/v1/completions?x=1":
				return "request line"
			case r.Host != "gw:80" || r.Header.Get("Host") != "":
				return "host"
			case r.ContentLength != 12 || p.chunked || p.close:
				return "framing"
			case r.Header.Get("Content-Type") != "application/json" || strings.Join(r.Header["X-Odd"], "|") != "v|w":
				return "fields"
			}
			return ""
		}},
		{"chunked", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n", func(r *http.Request, p parsed) string {
			if !p.chunked || r.ContentLength != -1 || r.Header.Get("Transfer-Encoding") != "" || len(r.TransferEncoding) != 1 {
				return "framing"
			}
			return ""
		}},
		{"escaped path", "GET /a%2Fb HTTP/1.1\r\nHost: x\r\n\r\n", func(r *http.Request, p parsed) string {
			if r.URL.Path != "/a/b" || r.URL.EscapedPath() != "/a%2Fb" {
				return "path " + r.URL.Path
			}
			return ""
		}},
		{"absolute form", "GET http://h:1/p?q HTTP/1.1\r\nHost: other\r\n\r\n", func(r *http.Request, p parsed) string {
			if r.Host != "h:1" || r.URL.Path != "/p" {
				return "host " + r.Host
			}
			return ""
		}},
		{"1.0 closes", "GET / HTTP/1.0\r\n\r\n", func(r *http.Request, p parsed) string {
			if !p.close || !r.Close || r.ProtoMinor != 0 {
				return "close"
			}
			return ""
		}},
		{"1.0 keep-alive and close", "GET / HTTP/1.0\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n", func(r *http.Request, p parsed) string {
			if !p.close || !r.Close {
				return "close"
			}
			return ""
		}},
		{"method with _ and -", "M-SEARCH_X / HTTP/1.1\r\nHost: x\r\n\r\n", func(r *http.Request, p parsed) string {
			if r.Method != "M-SEARCH_X" {
				return "method " + r.Method
			}
			return ""
		}},
		{"1.0 keep-alive", "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", func(r *http.Request, p parsed) string {
			if p.close {
				return "close"
			}
			return ""
		}},
		{"close", "GET / HTTP/1.1\r\nHost: x\r\nConnection: foo, close\r\n\r\n", func(r *http.Request, p parsed) string {
			if !p.close {
				return "close"
			}
			return ""
		}},
		{"leading CRLF", "\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n", func(r *http.Request, p parsed) string {
			if r.Method != "GET" {
				return "method"
			}
			return ""
		}},
		{"expect continue", "POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n", func(r *http.Request, p parsed) string {
			if !p.expectContinue {
				return "expect"
			}
			return ""
		}},
		{"obs-text value", "GET / HTTP/1.1\r\nHost: x\r\nX-A: caf\xc3\xa9\r\n\r\n", func(r *http.Request, p parsed) string {
			if r.Header.Get("X-A") != "caf\xc3\xa9" {
				return "value"
			}
			return ""
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, p, err := parseRaw(tc.raw)
			if err != nil {
				t.Fatal(err)
			}
			if msg := tc.check(r, p); msg != "" {
				t.Errorf("%s: %+v", msg, r)
			}
		})
	}
}

func TestChunkedBody(t *testing.T) {
	tests := []struct {
		name, raw, want string
		wantErr         bool
	}{
		{"two chunks", "2\r\nab\r\n3;ext=1\r\ncde\r\n0\r\n\r\n", "abcde", false},
		{"trailer", "1\r\na\r\n0\r\nX-T: 1\r\n\r\n", "a", false},
		{"upper hex", "A\r\n0123456789\r\n0\r\n\r\n", "0123456789", false},
		{"bare LF size", "1\na\r\n0\r\n\r\n", "", true},
		{"no hex", "\r\na\r\n0\r\n\r\n", "", true},
		{"junk after size", "1 x\r\na\r\n0\r\n\r\n", "", true},
		{"data overrun", "1\r\nab\r\n0\r\n\r\n", "a", true},
		{"huge size", "10000000000000000\r\n", "", true},
		{"bad trailer", "0\r\nX T: 1\r\n\r\n", "", true},
		{"cut", "5\r\nab", "ab", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &conn{srv: &Server{}, br: bufio.NewReader(strings.NewReader(tc.raw))}
			b := &body{c: c, chunked: true}
			got, err := io.ReadAll(b)
			if (err != nil) != tc.wantErr || string(got) != tc.want {
				t.Errorf("got %q, %v; want %q, error %v", got, err, tc.want, tc.wantErr)
			}
			if err == nil && !b.done {
				t.Error("body not done after its last chunk")
			}
		})
	}
}
