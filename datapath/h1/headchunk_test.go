package h1

import (
	"fmt"
	"strings"
	"testing"
)

// TestHeadStringKept reads heads one after another on one connection, as
// a keep-alive client sends them, and checks that every string handed out
// still holds its head after all the later ones: a chunk written over
// (reset, or used not advanced) fails it.
func TestHeadStringKept(t *testing.T) {
	head := func(n int, fill byte) string {
		line := "POST /v1/completions HTTP/1.1\r\n"
		return line + strings.Repeat(string(fill), n-len(line)-2) + "\r\n"
	}
	for _, tc := range []struct {
		name  string
		sizes []int
	}{
		{"wrk-sized heads past one chunk", []int{120, 120, 120, 120, 120, 120, 120, 120, 120, 120, 120, 120, 120, 120, 120, 120, 120, 120, 120, 120}},
		{"the room's end exactly", []int{100, 512, 512, 512, 410, 100}},
		{"a head longer than a chunk's share", []int{100, maxChunkedHead + 1, 200, 4000, 200}},
		{"at the share's bound", []int{100, maxChunkedHead, maxChunkedHead, maxChunkedHead, maxChunkedHead, maxChunkedHead}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &conn{}
			var want, got []string
			for i, n := range tc.sizes {
				b := []byte(head(n, 'a'+byte(i%26)))
				want = append(want, string(b))
				got = append(got, c.headString(b, i == 0))
				clear(b) // the caller's buffer is read into again
			}
			for i := range want {
				if got[i] != want[i] {
					t.Errorf("head %d (%d bytes) changed after later ones:\n got %.60q\nwant %.60q", i, len(want[i]), got[i], want[i])
				}
			}
		})
	}
}

// TestHeadStringAllocs checks which heads share a chunk: none of the
// first request's, every later one up to maxChunkedHead (one chunk
// for the 16 here), and a longer one alone.
func TestHeadStringAllocs(t *testing.T) {
	small := []byte("GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nAccept: */*\r\n\r\n") // past the 32 bytes a string kept on the stack may take
	long := []byte(fmt.Sprintf("GET / HTTP/1.1\r\nX: %s\r\n\r\n", strings.Repeat("y", maxChunkedHead)))
	for _, tc := range []struct {
		name  string
		b     []byte
		first bool
		want  float64 // allocations a head, over 16 heads
	}{
		{"a connection's first", small, true, 1},
		{"later, small", small, false, 1.0 / 16},
		{"later, past the share", long, false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			full := &headChunk{used: uint16(len(headChunk{}.room))}
			c := &conn{}
			got := testing.AllocsPerRun(1, func() {
				c.heads = full // the first later head takes a new chunk
				for range 16 {
					_ = c.headString(tc.b, tc.first)
				}
			}) / 16
			if got != tc.want {
				t.Errorf("%.4f allocations a head, want %.4f", got, tc.want)
			}
		})
	}
}
