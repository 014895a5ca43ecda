package h1

import (
	"bufio"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// wrkHead is the head the load (wrk -c64, POST /v1/completions)
// sends with its 55-byte body.
const wrkHead = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.2.1:32000\r\nContent-Length: 55\r\nContent-Type: application/json\r\n\r\n"

// BenchmarkReadRequestHead reads and parses wrk's request head the way a
// connection does, into a reused request and header map.
func BenchmarkReadRequestHead(b *testing.B) {
	src := strings.NewReader(wrkHead)
	c := &conn{srv: &Server{}, br: bufio.NewReaderSize(src, readBufSize)}
	var rs reqState
	h := make(http.Header, 4)
	b.ReportAllocs()
	for b.Loop() {
		src.Reset(wrkHead)
		c.br.Reset(src)
		if _, err := c.br.Peek(1); err != nil { // the head arrives whole, as in a step
			b.Fatal(err)
		}
		head, ends, err := stepHead(c)
		if err != nil {
			b.Fatal(err)
		}
		clear(h)
		rs.url = url.URL{}
		rs.req = http.Request{URL: &rs.url}
		if _, err := parseRequest(head, ends, &rs.req, rs.vals[:], h); err != nil {
			b.Fatal(err)
		}
	}
}

// stepHead reads a head as a serving step does with the head whole in the
// read buffer, on a connection's later request, with the line ends
// bufferedHead noted (none when the scan read it).
func stepHead(c *conn) (string, []uint16, error) {
	if whole := c.bufferedHead(); whole != nil {
		return c.readBufferedHead(whole, false), c.ends.list(), nil
	}
	head, err := c.readHead(false)
	return head, nil, err
}

// BenchmarkResponseHead answers with the engine's head the datapath
// relays for a small completion (five fields) and its 212-byte body.
func BenchmarkResponseHead(b *testing.B) {
	body := []byte(strings.Repeat("x", 212))
	c := &conn{srv: &Server{}, bw: bufio.NewWriterSize(io.Discard, writeBufSize)}
	rs := &reqState{req: http.Request{Method: http.MethodPost, ProtoMajor: 1, ProtoMinor: 1}}
	h := http.Header{
		"Content-Length": {"212"},
		"Content-Type":   {"application/json"},
		"X-Fake-Engine":  {"fake"},
		"Date":           {"Thu, 03 Dec 2026 11:17:36 GMT"},
		"X-Request-Id":   {"0c0b5a6f2d1e4f6a9b3c7d8e1f2a3b4c"},
	}
	b.ReportAllocs()
	for b.Loop() {
		rs.w = response{c: c, status: http.StatusOK, cl: -1, rs: rs, h: h}
		w := &rs.w
		w.WriteHeader(http.StatusOK)
		if _, err := w.Write(body); err != nil {
			b.Fatal(err)
		}
		w.finish()
		if w.err != nil {
			b.Fatal(w.err)
		}
	}
}

// BenchmarkResponseHeadFields is BenchmarkResponseHead with the engine's
// fields as pairs (WriteHeaderFields), the way the datapath relays a
// small completion: the engine's four fields and the client's request id,
// the header map left empty.
func BenchmarkResponseHeadFields(b *testing.B) {
	body := []byte(strings.Repeat("x", 212))
	c := &conn{srv: &Server{}, bw: bufio.NewWriterSize(io.Discard, writeBufSize)}
	rs := &reqState{req: http.Request{Method: http.MethodPost, ProtoMajor: 1, ProtoMinor: 1}}
	kv := []string{
		"Content-Length", "212",
		"Content-Type", "application/json",
		"X-Fake-Engine", "fake",
		"Date", "Thu, 03 Dec 2026 11:17:36 GMT",
		"X-Request-Id", "0c0b5a6f2d1e4f6a9b3c7d8e1f2a3b4c",
	}
	h := http.Header{}
	b.ReportAllocs()
	for b.Loop() {
		rs.w = response{c: c, status: http.StatusOK, cl: -1, rs: rs, h: h}
		w := &rs.w
		w.WriteHeaderFields(http.StatusOK, kv)
		if _, err := w.Write(body); err != nil {
			b.Fatal(err)
		}
		w.finish()
		if w.err != nil {
			b.Fatal(w.err)
		}
	}
}
