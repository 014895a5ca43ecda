package upstream

import (
	"bytes"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
)

// recWriter records each write it gets.
type recWriter struct{ writes [][]byte }

func (r *recWriter) Write(p []byte) (int, error) {
	r.writes = append(r.writes, append([]byte(nil), p...))
	return len(p), nil
}

// TestReqWriter: the bytes come out whole and in order, one socket write
// per buffer-full (a part as long as the buffer or longer goes out as it
// is), and release gives the buffer up.
func TestReqWriter(t *testing.T) {
	head := "POST / HTTP/1.1\r\n\r\n"
	for _, tc := range []struct {
		name   string
		parts  []string
		writes int // to the socket, with the Flush at the end
	}{
		{name: "small request", parts: []string{head, "{}"}, writes: 1},
		{name: "fills the buffer", parts: []string{head, strings.Repeat("a", bufSize-len(head))}, writes: 1},
		{name: "one byte past it", parts: []string{head, strings.Repeat("a", bufSize-len(head)+1)}, writes: 2},
		{name: "body larger than the buffer", parts: []string{head, strings.Repeat("b", 3*bufSize)}, writes: 2},
		{name: "many small parts", parts: strings.Split(strings.Repeat("hdr: v\r\n", 5000), "\n"), writes: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pool sync.Pool
			rec := &recWriter{}
			w := reqWriter{pool: &pool, w: rec}
			var want strings.Builder
			for i, p := range tc.parts {
				want.WriteString(p)
				switch i % 3 {
				case 0:
					w.WriteString(p)
				case 1:
					if _, err := w.Write([]byte(p)); err != nil {
						t.Fatal(err)
					}
				default:
					for j := range len(p) {
						if err := w.WriteByte(p[j]); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			got := bytes.Join(rec.writes, nil)
			if string(got) != want.String() {
				t.Fatalf("wrote %d bytes, want %d (or different bytes)", len(got), want.Len())
			}
			if len(rec.writes) != tc.writes {
				t.Fatalf("%d writes to the socket, want %d", len(rec.writes), tc.writes)
			}
			if w.bp == nil {
				t.Fatal("no buffer held after writes: grab did not borrow one")
			}
			w.release()
			if w.bp != nil || w.buf != nil {
				t.Fatal("release left the buffer with the writer")
			}
		})
	}
}

// TestReqWriterAvailableBuffer: appending to AvailableBuffer and writing
// it back (writeRequest's Content-Length) copies nothing and keeps order.
func TestReqWriterAvailableBuffer(t *testing.T) {
	var pool sync.Pool
	rec := &recWriter{}
	w := reqWriter{pool: &pool, w: rec}
	w.WriteString("Content-Length: ")
	if _, err := w.Write(append(w.AvailableBuffer(), "1234"...)); err != nil {
		t.Fatal(err)
	}
	w.WriteString("\r\n")
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := string(bytes.Join(rec.writes, nil)); got != "Content-Length: 1234\r\n" {
		t.Fatalf("wrote %q", got)
	}
}

// TestReqWriterWriteStringNoAlloc: a string past the buffer's free space is
// copied in pieces around a flush, never converted to a byte slice (which
// allocated once per request: each one's first write finds no buffer).
func TestReqWriterWriteStringNoAlloc(t *testing.T) {
	var pool sync.Pool
	w := reqWriter{pool: &pool, w: io.Discard}
	w.grab()
	s := strings.Repeat("x", 100)
	allocs := testing.AllocsPerRun(50, func() {
		w.buf = w.buf[:cap(w.buf)-10] // 10 bytes free: the string does not fit
		w.WriteString(s)
	})
	if allocs != 0 {
		t.Fatalf("WriteString allocated %.1f times per call", allocs)
	}
	if len(w.buf) != 90 {
		t.Fatalf("%d bytes held after the flush, want the string's last 90", len(w.buf))
	}
}

// TestReqWriterWriteField: a field line comes out whole whether it fits
// the borrowed buffer (one append), finds no buffer borrowed yet, or
// straddles the buffer's end (WriteString's flush), and not after a
// failed write.
func TestReqWriterWriteField(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before int // bytes held before the field; -1: no buffer borrowed
		fail   bool
		writes int
	}{
		{"fits", 10, false, 1},
		{"no buffer yet", -1, false, 1},
		{"exactly fills the buffer", bufSize - len("K: v\r\n"), false, 1},
		{"one byte past the buffer", bufSize - len("K: v\r\n") + 1, false, 2},
		{"after a failed write", 10, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pool sync.Pool
			rec := &recWriter{}
			w := reqWriter{pool: &pool, w: rec}
			var want string
			if tc.before >= 0 {
				want = strings.Repeat("a", tc.before)
				w.WriteString(want)
			}
			if tc.fail {
				w.err = io.ErrClosedPipe
			}
			w.writeField("K", "v")
			want += "K: v\r\n"
			err := w.Flush()
			if tc.fail {
				if err == nil || len(rec.writes) != 0 {
					t.Fatalf("wrote %d times after a failed write (err %v)", len(rec.writes), err)
				}
				return
			}
			if got := string(bytes.Join(rec.writes, nil)); err != nil || got != want {
				t.Fatalf("wrote %d bytes (%v), want %d", len(got), err, len(want))
			}
			if len(rec.writes) != tc.writes {
				t.Fatalf("%d writes to the socket, want %d", len(rec.writes), tc.writes)
			}
		})
	}
}

// BenchmarkWriteHead is an engine request head as the proxy writes it for
// a small POST (the fields a client sends plus the gateway's own), from
// the client's header map and from its list (HeadList).
func BenchmarkWriteHead(b *testing.B) {
	names := []string{"Content-Type", "User-Agent", "Accept", "Content-Length"}
	list := HeadList{Names: names, Codes: 0x04030201, Values: []string{"application/json", "wrk", "*/*", "55"},
		RequestID: "0123456789abcdef0123456789abcdef", ForwardedFor: "127.0.0.1"}
	header := http.Header{
		"Content-Type": {"application/json"}, "User-Agent": {"wrk"}, "Accept": {"*/*"},
		"X-Request-Id": {"0123456789abcdef0123456789abcdef"}, "X-Forwarded-For": {"127.0.0.1"},
	}
	for _, bc := range []struct {
		name string
		leg  Leg
	}{
		{"map", Leg{Path: "/v1/completions", Header: header}},
		{"list", Leg{Path: "/v1/completions", Header: header, List: list}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var pool sync.Pool
			w := reqWriter{pool: &pool, w: io.Discard}
			host := hostLine("127.0.0.1:8000") // the connection's
			b.ReportAllocs()
			for b.Loop() {
				writeHead(&w, host, http.MethodPost, &bc.leg)
				w.buf = w.buf[:0]
			}
		})
	}
}

// TestWriteHeadList: a leg's head written from its List is the head
// written from its Header, up to the order of names, when the list says
// what the map says (HeadList): listed fields, the request id and
// X-Forwarded-For replacing any of their names, the Sender's own names (Host, Content-Length,
// Transfer-Encoding) left out of both; and so is a list head that does
// not fit the buffer's room, which goes out from Header with the list's
// two put in (never in a buffer append moved).
func TestWriteHeadList(t *testing.T) {
	names := []string{"Content-Type", "Accept", "X-Request-Id", "X-Forwarded-For", "Content-Length", "Host", "Transfer-Encoding", "User-Agent"}
	code := func(i ...int) (c uint64) {
		for n, k := range i {
			c |= uint64(k+1) << (8 * n)
		}
		return c
	}
	const addr, target = "10.1.1.1:8000", "/v1/completions"
	// the room left for a head of one field "Accept: " + long, to fit
	// exactly (free) or miss by a byte (free - 1)
	long := strings.Repeat("a", 200)
	free := len("POST "+target) + len(hostLine(addr)) + len("Accept: \r\n") + len(long)
	for _, tc := range []struct {
		name   string
		codes  uint64
		values []string
		rid    string // RequestID
		xff    string // ForwardedFor
		path   string // the request target; "": target
		room   int    // the buffer's free bytes before the head; 0: all of it
		past   bool   // the head does not fit the room: written from Header
	}{
		{name: "empty"},
		{name: "set only", rid: "id", xff: "1.2.3.4"},
		{name: "listed only", codes: code(0, 1), values: []string{"application/json", "*/*"}},
		{name: "set replaces listed", codes: code(2, 0, 3), values: []string{"client", "text/plain", "10.0.0.1"},
			rid: "id", xff: "10.0.0.1, 1.2.3.4"},
		{name: "the Sender's names", codes: code(4, 5, 6, 1), values: []string{"9", "h", "chunked", "a"}},
		{name: "one set field", codes: code(1), values: []string{"a"}, xff: "1.2.3.4"},
		{name: "eight fields", codes: code(1, 0, 2, 3, 4, 5, 6, 7), values: []string{"a", "b", "c", "d", "e", "f", "g", "h"},
			rid: "id"},
		{name: "fills the room exactly", codes: code(1), values: []string{long}, room: free},
		{name: "a byte past the room", codes: code(1), values: []string{long}, room: free - 1, past: true},
		{name: "past the whole buffer", codes: code(1, 0), values: []string{strings.Repeat("b", bufSize), "c"},
			rid: "id", xff: "1.2.3.4", past: true},
		{name: "a target past the whole buffer", codes: code(1), values: []string{"a"}, rid: "id", xff: "1.2.3.4",
			path: "/" + strings.Repeat("p", bufSize), past: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// listed holds the listed fields alone, as the client's map
			// lacks X-Forwarded-For; full has the list's two put in.
			listed := http.Header{}
			n := 0
			for c := tc.codes; c != 0; c >>= 8 {
				listed[names[c&0xff-1]] = []string{tc.values[n]}
				n++
			}
			full := listed.Clone()
			if tc.rid != "" {
				full[headerRequestID] = []string{tc.rid}
			}
			if tc.xff != "" {
				full[headerForwardedFor] = []string{tc.xff}
			}
			list := HeadList{Names: names, Codes: tc.codes, Values: tc.values, RequestID: tc.rid, ForwardedFor: tc.xff}
			head := func(leg *Leg) string {
				var pool sync.Pool
				rec := &recWriter{}
				w := reqWriter{pool: &pool, w: rec}
				before := 0
				if tc.room > 0 {
					before = bufSize - tc.room
					w.WriteString(strings.Repeat("z", before))
				}
				writeHead(&w, hostLine(addr), http.MethodPost, leg)
				if cap(w.buf) != bufSize {
					t.Fatalf("the head grew the buffer to %d bytes", cap(w.buf))
				}
				if err := w.Flush(); err != nil {
					t.Fatal(err)
				}
				lines := strings.Split(string(bytes.Join(rec.writes, nil))[before:], "\r\n")
				slices.Sort(lines[1:])
				return strings.Join(lines, "\r\n")
			}
			path := target
			if tc.path != "" {
				path = tc.path
			}
			fromMap := head(&Leg{Path: path, Header: full})
			leg := &Leg{Path: path, Header: listed, List: list}
			fromList := head(leg)
			if fromHeader := leg.List.Names == nil; fromHeader != tc.past {
				t.Fatalf("written from Header: %v, want %v", fromHeader, tc.past)
			}
			if fromList != fromMap {
				t.Fatalf("list %q, map %q", fromList, fromMap)
			}
		})
	}
}
