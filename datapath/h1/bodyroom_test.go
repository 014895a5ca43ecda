package h1

import (
	"bufio"
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// TestBodyRoom: the room is lent only behind a committed head whose body
// goes out as written, cut to the declared length's rest, and the body
// read into it and written goes out once, after the head.
func TestBodyRoom(t *testing.T) {
	big := strings.Repeat("b", 2*writeBufSize)
	tests := []struct {
		name    string
		method  string
		status  int
		length  string // Content-Length ("": none)
		before  string // written the usual way first
		flush   bool   // Flush before asking
		after   string // written after the Flush
		fail    bool   // a write failed before
		body    string // read into the room and written, as much as fits
		wantLen int    // the room's length; -1: the writer's whole free room; -2: nil
	}{
		{name: "fits", method: http.MethodPost, status: 200, length: "7", body: `{"a":1}`, wantLen: 7},
		{name: "empty", method: http.MethodPost, status: 200, length: "0", wantLen: 0},
		{name: "after a part written", method: http.MethodPost, status: 200, length: "9", before: "ab", body: `{"a":1}`, wantLen: 7},
		{name: "bigger than the room", method: http.MethodPost, status: 200, length: strconv.Itoa(len(big)), body: big, wantLen: -1},
		{name: "length unknown: head held back", method: http.MethodPost, status: 200, wantLen: -2},
		{name: "chunked", method: http.MethodPost, status: 200, flush: true, after: "x", wantLen: -2},
		{name: "flushed: no writer held", method: http.MethodPost, status: 200, length: "7", flush: true, wantLen: -2},
		{name: "HEAD", method: http.MethodHead, status: 200, length: "7", wantLen: -2},
		{name: "no content", method: http.MethodPost, status: 204, wantLen: -2},
		{name: "after a failed write", method: http.MethodPost, status: 200, length: "7", fail: true, wantLen: -2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			s := &Server{}
			s.dateNow.Store(&dateEntry{sec: 1 << 62, s: "Thu, 03 Dec 2026 11:17:36 GMT"})
			c := &conn{srv: s, bw: bufio.NewWriterSize(&out, writeBufSize)}
			rs := &reqState{req: http.Request{Method: tc.method, ProtoMajor: 1, ProtoMinor: 1}}
			h := http.Header{}
			if tc.length != "" {
				h["Content-Length"] = []string{tc.length}
			}
			rs.w = response{c: c, status: http.StatusOK, cl: -1, rs: rs, h: h}
			rs.w.WriteHeader(tc.status)
			if tc.before != "" {
				if _, err := rs.w.Write([]byte(tc.before)); err != nil {
					t.Fatal(err)
				}
			}
			if tc.flush {
				rs.w.Flush()
			}
			if tc.after != "" {
				if _, err := rs.w.Write([]byte(tc.after)); err != nil || c.bw == nil {
					t.Fatalf("write after the flush: %v (writer %v)", err, c.bw)
				}
			}
			if tc.fail {
				rs.w.setErr(errWriteRefused)
			}
			room := BodyRoom(&rs.w)
			switch {
			case tc.wantLen == -2 && room != nil:
				t.Fatalf("room of %d bytes lent, want none", len(room))
			case tc.wantLen == -1 && len(room) != c.bw.Available():
				t.Fatalf("room %d bytes, want the writer's free %d", len(room), c.bw.Available())
			case tc.wantLen >= 0 && (room == nil || len(room) != tc.wantLen):
				t.Fatalf("room %d bytes (nil %v), want %d", len(room), room == nil, tc.wantLen)
			}
			if tc.wantLen == -2 || tc.fail {
				return
			}
			// The relay's way: read into the room, write what was read,
			// then the rest as usual.
			n := copy(room, tc.body)
			if _, err := rs.w.Write(room[:n]); err != nil {
				t.Fatal(err)
			}
			if n < len(tc.body) {
				if _, err := rs.w.Write([]byte(tc.body[n:])); err != nil {
					t.Fatal(err)
				}
			}
			rs.w.finish()
			_, got, _ := strings.Cut(out.String(), "\r\n\r\n")
			if want := tc.before + tc.body; rs.w.err != nil || got != want || c.closeAfter {
				t.Errorf("body %d bytes %.40q (err %v, close %v), want %d bytes %.40q", len(got), got, rs.w.err, c.closeAfter, len(want), want)
			}
		})
	}
}

// TestBodyRoomOtherWriter: a writer not this server's lends nothing.
func TestBodyRoomOtherWriter(t *testing.T) {
	if room := BodyRoom(httptest.NewRecorder()); room != nil {
		t.Errorf("room of %d bytes from a recorder", len(room))
	}
}
