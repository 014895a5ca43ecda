package h1

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestWriteHeaderFields holds WriteHeaderFields to WriteHeader with the
// same fields in the map: for every case the client gets the same bytes
// (fields of one name in their order; names in any order, as the map's
// walk has none), and the connection the same fate.
func TestWriteHeaderFields(t *testing.T) {
	long := strings.Repeat("v", 3000)
	huge := strings.Repeat("w", 5<<10)
	tests := []struct {
		name             string
		method           string
		http10           bool
		status           int
		kv               []string
		h                http.Header // what the handler set in the map itself
		writes           []string
		flush            bool // a write past what is held back first: the head goes out without a length
		continue1, close bool
	}{
		{name: "engine's small answer", status: 200,
			kv:     []string{"Content-Length", "2", "Content-Type", "application/json", "X-Fake-Engine", "f", "Date", "d", "X-Request-Id", "r"},
			writes: []string{"{}"}},
		{name: "uvicorn's", status: 200,
			kv:     []string{"Date", "d", "Server", "uvicorn", "Content-Length", "2", "Content-Type", "application/json"},
			h:      http.Header{"X-Request-Id": {"r"}},
			writes: []string{"{}"}},
		{name: "stream", status: 200, kv: []string{"Content-Type", "text/event-stream", "Cache-Control", "no-cache"},
			writes: []string{"data: 1\n\n", "data: 2\n\n"}, flush: true},
		{name: "unknown length held back", status: 200, kv: []string{"Content-Type", "application/json"}, writes: []string{"{}"}},
		{name: "unknown length, nothing written", status: 200, kv: []string{"X-A", "1"}},
		{name: "no fields", status: 200, kv: []string{}, writes: []string{"ok"}},
		{name: "invalid length", status: 200, kv: []string{"Content-Length", "x", "X-A", "1"}, writes: []string{"ok"}},
		{name: "invalid length held back", status: 200, kv: []string{"Content-Length", "-1"}, writes: []string{"ok"}, flush: true},
		{name: "invalid length, no content", status: 204, kv: []string{"Content-Length", "abc"}},
		{name: "length, no content", status: 204, kv: []string{"Content-Length", "0"}},
		{name: "not modified", status: 304, kv: []string{"Content-Length", "12", "Etag", "e"}},
		{name: "HEAD", method: http.MethodHead, status: 200, kv: []string{"Content-Length", "12", "Content-Type", "text/plain"}},
		{name: "HTTP/1.0", http10: true, status: 200, kv: []string{"Content-Length", "2"}, writes: []string{"ok"}},
		{name: "HTTP/1.0 unknown length", http10: true, status: 200, kv: []string{"X-A", "1"}, writes: []string{"ok"}, flush: true},
		{name: "short body", status: 200, kv: []string{"Content-Length", "5"}, writes: []string{"ok"}},
		{name: "Connection close", status: 200, kv: []string{"Content-Length", "2", "Connection", "keep-alive, close"}, writes: []string{"ok"}},
		{name: "Connection kept", status: 200, kv: []string{"Content-Length", "2", "Connection", "keep-alive"}, writes: []string{"ok"}},
		{name: "Connection beside the map's", status: 200, kv: []string{"Content-Length", "2", "Connection", "x"},
			h: http.Header{"Connection": {"close"}}, writes: []string{"ok"}},
		{name: "Transfer-Encoding dropped", status: 200, kv: []string{"Transfer-Encoding", "chunked", "X-A", "1"}, writes: []string{"ok"}, flush: true},
		{name: "values scrubbed", status: 200, kv: []string{"Content-Length", "0", "X-Bad", "a\rb\x00c", "X-Long-Bad", "0123456789abcdef\n0123456789"}},
		{name: "repeated names", status: 200, kv: []string{"X-Two", "a", "X-One", "1", "X-Two", "b", "Vary", "x", "Vary", "y", "Content-Length", "0"}},
		{name: "the map's fields too", status: 503, kv: []string{"Content-Length", "0"},
			h: http.Header{"Retry-After": {"1"}, "X-Request-Id": {"r"}, "Connection": {"close"}}, close: true},
		{name: "handler's date wins", status: 200, kv: []string{"Date", "engine's", "Content-Length", "0"}},
		{name: "type sniffed without one", status: 200, kv: []string{"X-A", "1"}, writes: []string{"<html>"}},
		{name: "past the free space", status: 200, kv: []string{"Content-Length", "0", "X-Long", long, "X-Long", long}},
		{name: "past the whole buffer", status: 200, kv: []string{"Content-Length", "2", "X-Huge", huge}, writes: []string{"ok"}},
		{name: "continue owed", status: 200, kv: []string{"Content-Length", "2"}, writes: []string{"ok"}, continue1: true},
		{name: "interim status first", status: 101, kv: []string{"Content-Length", "2", "X-A", "1"}, writes: []string{"ok"}},
		{name: "interim status, invalid length", status: 103, kv: []string{"Content-Length", "x", "X-A", "1"}, writes: []string{"ok"}},
		{name: "closing connection", status: 200, kv: []string{"Content-Length", "2"}, writes: []string{"ok"}, close: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			viaMap := writeFieldsCase(tc.method, tc.http10, tc.status, tc.kv, tc.h, tc.writes, tc.flush, tc.continue1, tc.close, false)
			viaKV := writeFieldsCase(tc.method, tc.http10, tc.status, tc.kv, tc.h, tc.writes, tc.flush, tc.continue1, tc.close, true)
			if viaKV != viaMap {
				t.Errorf("fields as pairs:\n%.400q\nin the map:\n%.400q", viaKV, viaMap)
			}
		})
	}
}

// writeFieldsCase answers one request with the fields kv, in the map
// (pairs false) or as pairs, and returns what the client and the
// connection see: the head's lines, each name's in their order and the
// names sorted, then the body, the declared length and whether the
// connection closes.
func writeFieldsCase(method string, http10 bool, status int, kv []string, h http.Header, writes []string, flush, continue1, closing, pairs bool) string {
	if method == "" {
		method = http.MethodGet
	}
	minor := 1
	if http10 {
		minor = 0
	}
	var out bytes.Buffer
	s := &Server{}
	s.dateNow.Store(&dateEntry{sec: 1 << 62, s: "Thu, 03 Dec 2026 11:17:36 GMT"})
	c := &conn{srv: s, bw: bufio.NewWriterSize(&out, writeBufSize), closeAfter: closing}
	rs := &reqState{req: http.Request{Method: method, ProtoMajor: 1, ProtoMinor: minor}}
	rs.body.continue100 = continue1
	rs.w = response{c: c, status: http.StatusOK, cl: -1, rs: rs}
	w := &rs.w
	kv = slices.Clone(kv)
	if pairs {
		w.h = h.Clone()
		w.WriteHeaderFields(status, kv)
	} else {
		// The engine's fields first (parsed into the map), then what
		// the handler set.
		hh := w.Header()
		for i := 0; i+1 < len(kv); i += 2 {
			hh[kv[i]] = append(hh[kv[i]], kv[i+1])
		}
		for k, vv := range h {
			hh[k] = append(hh[k], vv...)
		}
		w.WriteHeader(status)
	}
	if flush {
		_, _ = w.Write(bytes.Repeat([]byte{'.'}, smallBody+1))
	}
	for _, b := range writes {
		_, _ = w.Write([]byte(b))
	}
	w.finish()
	return fmt.Sprintf("%s\ncl %d chunked %v close %v err %v", normalHead(out.String()), w.cl, w.chunked, c.closeAfter, w.err)
}

// normalHead returns raw with each head's field lines grouped by name
// (stable: a name's lines in their order) and the groups sorted.
func normalHead(raw string) string {
	head, body, ok := strings.Cut(raw, "\r\n\r\n")
	if !ok {
		return raw
	}
	lines := strings.Split(head, "\r\n")
	fields := lines[1:]
	slices.SortStableFunc(fields, func(a, b string) int {
		ka, _, _ := strings.Cut(a, ":")
		kb, _, _ := strings.Cut(b, ":")
		return strings.Compare(ka, kb)
	})
	return lines[0] + "\r\n" + strings.Join(fields, "\r\n") + "\r\n\r\n" + body
}

// TestWritePairsRoom holds writePairs' own room check to the head's
// reservation: around the end of a tentative head's free space a field
// goes in only whole and only where it fits, and one that does not marks
// the head over (dropped) instead of writing past the space.
func TestWritePairsRoom(t *testing.T) {
	kv := []string{"X-A", "1", "Content-Length", "22", "X-Ccc", "\r3"}
	lines := []string{"X-A: 1\r\n", "Content-Length: 22\r\n", "X-Ccc:  3\r\n"}
	need := len(strings.Join(lines, ""))
	for room := 0; room <= need+1; room++ {
		var want []byte
		wantOver := false
		for _, l := range lines {
			if len(want)+len(l) > room {
				wantOver = true
				continue
			}
			want = append(want, l...)
		}
		w := &response{c: &conn{}, cl: -1}
		hb := headBuf{b: make([]byte, 0, room), tentative: true}
		var hn headNotes
		w.writePairs(&hb, kv, &hn)
		if string(hb.b) != string(want) || hb.over != wantOver || w.cl != 22 || hn.nLength != 1 {
			t.Errorf("room %d: %q over %v cl %d lengths %d, want %q over %v cl 22 lengths 1",
				room, hb.b, hb.over, w.cl, hn.nLength, want, wantOver)
		}
	}
}
