package h1

import (
	"bufio"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/infergate/infergate/datapath/hop"
)

// FuzzParseRequest feeds arbitrary bytes to the head reader, the parser
// and the body framing. Whatever it accepts must be self-consistent: one
// framing (never both a length and chunked), a token method, no control
// byte in any field, and a body read that ends within the input.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
		"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nA: b\r\n c\r\n\r\n",
		"GET /a%2F HTTP/1.0\r\n\r\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		c := &conn{srv: &Server{MaxHeaderBytes: 8 << 10}, br: bufio.NewReaderSize(strings.NewReader(raw), readBufSize)}
		// The one-pass measure of a buffered head takes only what the
		// scan reads the same way.
		fast := &conn{srv: c.srv, br: bufio.NewReaderSize(strings.NewReader(raw), readBufSize)}
		_, _ = fast.br.Peek(1)
		whole := fast.bufferedHead()
		head, err := c.readHead(false)
		if whole != nil {
			if got := fast.readBufferedHead(whole, false); err != nil || got != head || fast.br.Buffered() != c.br.Buffered() {
				t.Fatalf("buffered head %q, the scan's %q (%v): %q", got, head, err, raw)
			}
		}
		if err != nil {
			return
		}
		r := &http.Request{URL: &url.URL{}}
		var vals [16]string
		p, err := parseRequest(head, nil, r, vals[:], nil)
		if whole != nil {
			// The line ends bufferedHead noted spare searches, nothing else.
			if diff := parseDiff(head, fast.ends.list(), r, p, err); diff != "" {
				t.Fatalf("%s: %q", diff, raw)
			}
		}
		if err != nil {
			return
		}
		if p.chunked && (r.ContentLength != -1 || len(r.Header["Content-Length"]) > 0) {
			t.Fatalf("chunked with a length: %q", raw)
		}
		if !p.chunked && r.ContentLength < 0 {
			t.Fatalf("negative length: %q", raw)
		}
		if len(r.Header["Content-Length"]) > 1 || len(r.Header["Transfer-Encoding"]) > 0 {
			t.Fatalf("framing fields left ambiguous: %q", raw)
		}
		for i := 0; i < len(r.Method); i++ {
			if !methodChar[r.Method[i]] {
				t.Fatalf("method %q accepted", r.Method)
			}
		}
		if got := listMap(p, vals[:]); got != nil && !maps.EqualFunc(got, r.Header, slices.Equal) {
			t.Fatalf("the head's list %v, its map %v: %q", got, r.Header, raw)
		}
		for _, k := range commonRequestHeaders {
			if (Fields{stored: p.stored, known: true}).Lacks(FieldOf(k)) && r.Header[k] != nil {
				t.Fatalf("%s stored, the head said to lack it: %q", k, raw)
			}
		}
		for k, vv := range r.Header {
			if !validFieldName(k) {
				t.Fatalf("field name %q accepted", k)
			}
			if hop.IsHeader(k) && !p.hopField {
				t.Fatalf("hop-by-hop %s stored, the head called hop-free: %q", k, raw)
			}
			for _, v := range vv {
				if strings.ContainsAny(v, "\r\n\x00") {
					t.Fatalf("field %s value %q accepted", k, v)
				}
			}
		}
		if r.ContentLength != 0 {
			b := &body{c: c, chunked: p.chunked, n: max(r.ContentLength, 0)}
			n, _ := io.Copy(io.Discard, b)
			if n > int64(len(raw)) {
				t.Fatalf("read %d body bytes from %d input bytes", n, len(raw))
			}
		}
	})
}
