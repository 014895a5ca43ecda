package h1

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestResponseHead writes heads through the connection's writer and holds
// each to the bytes the server sends: one handler field per case, so the
// map's order does not matter, with the fields the server adds.
func TestResponseHead(t *testing.T) {
	const date = "Date: (the server's)\r\n"
	serverDate := regexp.MustCompile(`Date: [A-Z][a-z]{2}, \d\d [A-Z][a-z]{2} \d{4} \d\d:\d\d:\d\d GMT\r\n`)
	long := strings.Repeat("v", 3000)  // two fit the free space apart, not together
	huge := strings.Repeat("w", 5<<10) // past the whole buffer
	tests := []struct {
		name   string
		minor  int
		status int
		h      http.Header
		body   string
		close  bool // the connection closes after this response
		want   string
	}{
		{"length", 1, 200, http.Header{"Content-Length": {"2"}}, "{}", false,
			"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n" + date + "\r\n{}"},
		{"held back", 1, 200, http.Header{"Content-Type": {"application/json"}}, "{}", false,
			"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + date + "Content-Length: 2\r\n\r\n{}"},
		{"sniffed type", 1, 200, http.Header{}, "hi", false,
			"HTTP/1.1 200 OK\r\n" + date + "Content-Type: text/plain; charset=utf-8\r\nContent-Length: 2\r\n\r\nhi"},
		{"value scrubbed", 1, 200, http.Header{"X-Bad": {"a\r\nInjected: 1\x00"}}, "", false,
			"HTTP/1.1 200 OK\r\nX-Bad: a  Injected: 1 \r\n" + date + "Content-Length: 0\r\n\r\n"},
		{"two values", 1, 200, http.Header{"X-Two": {"a", "b"}}, "", false,
			"HTTP/1.1 200 OK\r\nX-Two: a\r\nX-Two: b\r\n" + date + "Content-Length: 0\r\n\r\n"},
		{"invalid name dropped", 1, 200, http.Header{"X Bad": {"a"}}, "", false,
			"HTTP/1.1 200 OK\r\n" + date + "Content-Length: 0\r\n\r\n"},
		{"empty name dropped", 1, 200, http.Header{"": {"a"}}, "", false,
			"HTTP/1.1 200 OK\r\n" + date + "Content-Length: 0\r\n\r\n"},
		{"common name", 1, 200, http.Header{"X-Request-Id": {"r1"}}, "", false,
			"HTTP/1.1 200 OK\r\nX-Request-Id: r1\r\n" + date + "Content-Length: 0\r\n\r\n"},
		{"long value scrubbed", 1, 200, http.Header{"X-Bad": {"0123456789abcdef\n0123456789"}}, "", false,
			"HTTP/1.1 200 OK\r\nX-Bad: 0123456789abcdef 0123456789\r\n" + date + "Content-Length: 0\r\n\r\n"},
		{"transfer-encoding dropped", 1, 200, http.Header{"Transfer-Encoding": {"gzip"}}, "", false,
			"HTTP/1.1 200 OK\r\n" + date + "Content-Length: 0\r\n\r\n"},
		{"handler's date", 1, 200, http.Header{"Date": {"x"}}, "", false,
			"HTTP/1.1 200 OK\r\nDate: x\r\nContent-Length: 0\r\n\r\n"},
		{"nil date suppressed", 1, 200, http.Header{"Date": nil}, "", false,
			"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"},
		{"no content", 1, 204, http.Header{}, "", false,
			"HTTP/1.1 204 No Content\r\n" + date + "\r\n"},
		{"close", 1, 200, http.Header{"Content-Length": {"0"}}, "", true,
			"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n" + date + "Connection: close\r\n\r\n"},
		{"close named by the handler", 1, 200, http.Header{"Connection": {"close"}}, "", true,
			"HTTP/1.1 200 OK\r\nConnection: close\r\n" + date + "Content-Length: 0\r\n\r\n"},
		{"1.0 keep-alive", 0, 200, http.Header{"Content-Length": {"0"}}, "", false,
			"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n" + date + "Connection: keep-alive\r\n\r\n"},
		{"odd status", 1, 599, http.Header{"Content-Length": {"0"}}, "", false,
			"HTTP/1.1 599 \r\nContent-Length: 0\r\n" + date + "\r\n"},
		{"long value", 1, 200, http.Header{"X-Long": {long, long}}, "", false,
			"HTTP/1.1 200 OK\r\nX-Long: " + long + "\r\nX-Long: " + long + "\r\n" + date + "Content-Length: 0\r\n\r\n"},
		{"value past the buffer", 1, 200, http.Header{"X-Huge": {huge}}, "", false,
			"HTTP/1.1 200 OK\r\nX-Huge: " + huge + "\r\n" + date + "Content-Length: 0\r\n\r\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			s := &Server{}
			s.dateNow.Store(&dateEntry{sec: 1 << 62, s: "Thu, 03 Dec 2026 11:17:36 GMT"})
			c := &conn{srv: s, bw: bufio.NewWriterSize(&out, writeBufSize), closeAfter: tc.close}
			rs := &reqState{req: http.Request{Method: http.MethodGet, ProtoMajor: 1, ProtoMinor: tc.minor}}
			rs.w = response{c: c, status: http.StatusOK, cl: -1, rs: rs, h: tc.h}
			rs.w.WriteHeader(tc.status)
			if tc.body != "" {
				if _, err := rs.w.Write([]byte(tc.body)); err != nil {
					t.Fatal(err)
				}
			}
			rs.w.finish()
			if got := serverDate.ReplaceAllString(out.String(), date); rs.w.err != nil || got != tc.want {
				t.Errorf("wrote %.300q (%v)\nwant  %.300q", got, rs.w.err, tc.want)
			}
		})
	}
}

// failWriter refuses every write.
type failWriter struct{}

var errWriteRefused = errors.New("write refused")

func (failWriter) Write([]byte) (int, error) { return 0, errWriteRefused }

// TestResponseHeadWriteFails: a head that must be flushed in pieces
// reports the connection's write failure and closes after it.
func TestResponseHeadWriteFails(t *testing.T) {
	c := &conn{srv: &Server{}, bw: bufio.NewWriterSize(failWriter{}, writeBufSize)}
	rs := &reqState{req: http.Request{Method: http.MethodGet, ProtoMajor: 1, ProtoMinor: 1}}
	long := strings.Repeat("v", 3000)
	rs.w = response{c: c, status: http.StatusOK, cl: -1, rs: rs, h: http.Header{"X-Long": {long, long}}}
	rs.w.WriteHeader(http.StatusOK)
	rs.w.finish()
	if !errors.Is(rs.w.err, errWriteRefused) || !c.closeAfter {
		t.Errorf("err %v, closeAfter %v; want the write's failure and a close", rs.w.err, c.closeAfter)
	}
}

// TestWriteHeaderEarlyHead: WriteHeader commits the head when the length
// is known and the head fits the writer's free space; otherwise nothing
// is in the writer (and a writer taken for the head alone is given back)
// until a write or finish writes it.
func TestWriteHeaderEarlyHead(t *testing.T) {
	long := strings.Repeat("v", 3000)
	tests := []struct {
		name      string
		h         http.Header
		continue1 bool // a "100 Continue" is still owed
		committed bool
		cl        int64
		close     bool // closeAfter set from the handler's Connection field
		lengthOut bool // the handler's Content-Length is still in its map
	}{
		{"length", http.Header{"Content-Length": {"2"}}, false, true, 2, false, true},
		{"no length", http.Header{"Content-Type": {"application/json"}}, false, false, -1, false, false},
		{"nil header", nil, false, false, -1, false, false},
		{"invalid length deleted", http.Header{"Content-Length": {"x"}}, false, false, -1, false, false},
		{"two lengths", http.Header{"Content-Length": {"2", "2"}}, false, false, -1, false, true},
		{"close named", http.Header{"Content-Length": {"0"}, "Connection": {"keep-alive, close"}}, false, true, 0, true, true},
		{"close among values", http.Header{"Content-Length": {"0"}, "Connection": {"x", "Close"}}, false, true, 0, true, true},
		{"continue owed", http.Header{"Content-Length": {"2"}}, true, false, 2, false, true},
		{"past the free space", http.Header{"Content-Length": {"0"}, "X-Long": {long, long}}, false, false, 0, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &Server{}
			c := &conn{srv: s}
			rs := &reqState{req: http.Request{Method: http.MethodGet, ProtoMajor: 1, ProtoMinor: 1}}
			rs.body.continue100 = tc.continue1
			rs.w = response{c: c, status: http.StatusOK, cl: -1, rs: rs, h: tc.h}
			rs.w.WriteHeader(http.StatusOK)
			w := &rs.w
			buffered := c.bw != nil && c.bw.Buffered() > 0
			if w.headOut != tc.committed || buffered != tc.committed || w.cl != tc.cl || c.closeAfter != tc.close {
				t.Errorf("headOut %v, buffered %v, cl %d, closeAfter %v; want committed %v, cl %d, closeAfter %v",
					w.headOut, buffered, w.cl, c.closeAfter, tc.committed, tc.cl, tc.close)
			}
			if !tc.committed && c.bw != nil {
				t.Error("a writer is held for a dropped head")
			}
			if _, ok := w.h[hdrContentLength]; ok != tc.lengthOut {
				t.Errorf("Content-Length in the map: %v, want %v", ok, tc.lengthOut)
			}
		})
	}
}

// TestChunkedBodyFrames: each write of a chunked body goes out as one
// chunk whose size line is the write's length in hex, whether its frame
// fits the writer's free room (built there whole) or not (size, data and
// CRLF written apart, the data past the buffer written through).
func TestChunkedBodyFrames(t *testing.T) {
	tests := []struct {
		name   string
		writes []int // lengths, in order
	}{
		{"one small", []int{5}},
		{"hex digits", []int{1, 15, 16, 255, 256, 4000 - 1000}},
		{"frame just fits", []int{writeBufSize - chunkFrame - 200}},
		{"second frame does not fit", []int{3000, 1000}},
		{"past the buffer", []int{5 << 10}},
		{"small after large", []int{9 << 10, 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			s := &Server{}
			s.dateNow.Store(&dateEntry{sec: 1 << 62, s: "Thu, 03 Dec 2026 11:17:36 GMT"})
			c := &conn{srv: s, bw: bufio.NewWriterSize(&out, writeBufSize)}
			rs := &reqState{req: http.Request{Method: http.MethodGet, ProtoMajor: 1, ProtoMinor: 1}}
			rs.w = response{c: c, status: http.StatusOK, cl: -1, rs: rs, h: http.Header{"Content-Type": {"text/event-stream"}}}
			rs.w.WriteHeader(http.StatusOK)
			rs.w.flushed = true // a streaming answer: nothing held back
			var want strings.Builder
			for i, n := range tc.writes {
				p := bytes.Repeat([]byte{'a' + byte(i)}, n)
				if _, err := rs.w.Write(p); err != nil {
					t.Fatal(err)
				}
				want.WriteString(strconv.FormatInt(int64(n), 16) + "\r\n" + string(p) + "\r\n")
			}
			rs.w.finish()
			want.WriteString("0\r\n\r\n")
			_, body, ok := strings.Cut(out.String(), "\r\n\r\n")
			if !ok || rs.w.err != nil || !rs.w.chunked || body != want.String() {
				t.Errorf("body %.200q (%v, chunked %v)\nwant %.200q", body, rs.w.err, rs.w.chunked, want.String())
			}
		})
	}
}

func TestAppendChunkSize(t *testing.T) {
	for _, n := range []int{0, 1, 9, 10, 15, 16, 17, 255, 256, 4095, 4096, 32 << 10, 1<<31 - 1, 1<<62 + 5} {
		got := string(appendChunkSize([]byte("x"), n))
		if want := "x" + strconv.FormatInt(int64(n), 16) + "\r\n"; got != want {
			t.Errorf("appendChunkSize(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestStreamedChunksOnTheWire: a streamed answer's writes after a flush go
// out as the same chunks whether the socket takes each one straight
// (sockio.Conn.WriteFrame, inside the request's step) or the writer
// buffers it (a write after another write that was not flushed, the
// first write, held back until the head goes out): the body on the wire
// is each write framed in order.
func TestStreamedChunksOnTheWire(t *testing.T) {
	type write struct {
		n     int
		flush bool // Flush after the write
	}
	tests := []struct {
		name   string
		first  bool // the head flushed before the first write
		writes []write
	}{
		{"each flushed", true, []write{{1, true}, {15, true}, {16, true}, {255, true}, {256, true}, {4096, true}, {200, true}}},
		{"unflushed after flushed", true, []write{{9, true}, {30, false}, {40, false}, {7, true}}},
		{"past the buffer", true, []write{{40 << 10, true}, {3, true}}},
		{"the first write flushed with the head", false, []write{{5, true}, {6, true}, {7, true}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var want strings.Builder
			_, addr := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				if tc.first {
					w.(http.Flusher).Flush()
				}
				for i, wr := range tc.writes {
					p := bytes.Repeat([]byte{'a' + byte(i)}, wr.n)
					if _, err := w.Write(p); err != nil {
						t.Error(err)
					}
					if wr.flush {
						if err := w.(interface{ FlushError() error }).FlushError(); err != nil {
							t.Error(err)
						}
					}
				}
			}))
			for i, wr := range tc.writes {
				want.WriteString(strconv.FormatInt(int64(wr.n), 16) + "\r\n" + strings.Repeat(string(rune('a'+i)), wr.n) + "\r\n")
			}
			want.WriteString("0\r\n\r\n")
			nc, br := dialServer(t, addr)
			if _, err := io.WriteString(nc, "GET /s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			raw, err := io.ReadAll(br)
			if err != nil {
				t.Fatal(err)
			}
			head, body, ok := strings.Cut(string(raw), "\r\n\r\n")
			if !ok || !strings.Contains(head, "Transfer-Encoding: chunked") || body != want.String() {
				t.Errorf("head %q\nbody %.300q\nwant %.300q", head, body, want.String())
			}
		})
	}
}

// TestStatusLine: the precomputed lines and the composed ones at and
// past their table's edges.
func TestStatusLine(t *testing.T) {
	for _, tc := range []struct {
		minor, code int
		want        string
	}{
		{1, 200, "HTTP/1.1 200 OK\r\n"},
		{1, 503, "HTTP/1.1 503 Service Unavailable\r\n"},
		{1, 511, "HTTP/1.1 511 Network Authentication Required\r\n"},
		{1, 299, "HTTP/1.1 299 \r\n"},
		{1, 599, "HTTP/1.1 599 \r\n"},
		{1, 600, "HTTP/1.1 600 \r\n"},
		{1, 199, "HTTP/1.1 199 \r\n"},
		{1, 101, "HTTP/1.1 101 Switching Protocols\r\n"},
		{0, 200, "HTTP/1.0 200 OK\r\n"},
		{0, 404, "HTTP/1.0 404 Not Found\r\n"},
	} {
		if got := statusLine(tc.minor, tc.code); got != tc.want {
			t.Errorf("statusLine(%d, %d) = %q, want %q", tc.minor, tc.code, got, tc.want)
		}
	}
}

// TestWritesAfterFlushFraming: once a response is flushed, a write goes
// straight to the socket as one chunk only when the body is chunked; a
// declared length, an HTTP/1.0 client (the close ends the body) and HEAD
// keep their own framing (Write's straight path checks w.chunked).
func TestWritesAfterFlushFraming(t *testing.T) {
	tests := []struct {
		name     string
		req      string
		length   string // Content-Length the handler declares ("": none)
		wantHead string // a line the head must hold
		wantBody string
	}{
		{"chunked", "GET /s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "",
			"Transfer-Encoding: chunked", "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"},
		{"declared length", "GET /s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "5",
			"Content-Length: 5", "abcde"},
		{"HTTP/1.0", "GET /s HTTP/1.0\r\nHost: x\r\n\r\n", "",
			"HTTP/1.0 200", "abcde"},
		{"HEAD", "HEAD /s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "",
			"HTTP/1.1 200", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, addr := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.length != "" {
					w.Header().Set("Content-Length", tc.length)
				}
				w.(http.Flusher).Flush()
				for _, p := range []string{"abc", "de"} {
					_, _ = io.WriteString(w, p)
					w.(http.Flusher).Flush()
				}
			}))
			nc, br := dialServer(t, addr)
			if _, err := io.WriteString(nc, tc.req); err != nil {
				t.Fatal(err)
			}
			raw, err := io.ReadAll(br)
			if err != nil {
				t.Fatal(err)
			}
			head, body, ok := strings.Cut(string(raw), "\r\n\r\n")
			if !ok || !strings.Contains(head, tc.wantHead) || body != tc.wantBody {
				t.Errorf("head %q\nbody %q\nwant a head with %q, body %q", head, body, tc.wantHead, tc.wantBody)
			}
		})
	}
}

// TestFlushSendsEachEvent: each event written and flushed reaches the
// client before the handler writes the next (it waits for the client to
// read it), through Flush and FlushError alike, written straight to the
// socket or, where the socket is not written from the request's step
// (race builds), buffered and flushed.
func TestFlushSendsEachEvent(t *testing.T) {
	tests := []struct {
		name  string
		flush func(http.ResponseWriter)
	}{
		{"Flush", func(w http.ResponseWriter) { w.(http.Flusher).Flush() }},
		{"FlushError", func(w http.ResponseWriter) { _ = w.(interface{ FlushError() error }).FlushError() }},
	}
	events := []string{"data: a\n\n", "data: bb\n\n", "data: ccc\n\n"}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			read := make(chan struct{})
			_, addr := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				tc.flush(w)
				for _, ev := range events {
					_, _ = io.WriteString(w, ev)
					tc.flush(w)
					select {
					case <-read:
					case <-time.After(5 * time.Second):
						t.Errorf("event %q: the client did not read it", ev)
						return
					}
				}
			}))
			nc, br := dialServer(t, addr)
			if _, err := io.WriteString(nc, "GET /s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			if _, err := http.ReadResponse(br, nil); err != nil {
				t.Fatal(err)
			}
			for _, ev := range events {
				want := strconv.FormatInt(int64(len(ev)), 16) + "\r\n" + ev + "\r\n"
				got := make([]byte, len(want))
				if _, err := io.ReadFull(br, got); err != nil || string(got) != want {
					t.Fatalf("chunk %q, %v; want %q", got, err, want)
				}
				select {
				case read <- struct{}{}:
				case <-time.After(5 * time.Second):
					t.Fatalf("chunk %q: the handler no longer waits", got)
				}
			}
		})
	}
}
