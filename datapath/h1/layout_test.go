package h1

import (
	"testing"
	"unsafe"
)

// TestConnLayout holds the cache-line layout a relayed SSE event relies
// on (conn.go): the connection's write buffer pointer shares a line with
// the first 40 bytes of its sockio.Conn (what a write in the read wait
// reads). Why measured on heap conns and not on field offsets: a conn
// (over 512 bytes, with pointers) starts 8 bytes into its slot, after the
// runtime's malloc header (Go 1.22 on), so its offsets alone do not say
// where its lines fall; and several conns, so that a size class whose
// objects do not all start at the same place in a line fails too.
func TestConnLayout(t *testing.T) {
	const n = 16
	heap := make(chan *conn, n) // a send moves each conn to the heap, as the server's are
	for range n {
		heap <- &conn{}
	}
	close(heap)
	for c := range heap {
		from := uintptr(unsafe.Pointer(&c.bw))
		to := uintptr(unsafe.Pointer(&c.sock)) + 40
		if from/64 != (to-1)/64 {
			t.Fatalf("conn.bw and sock's first 40 bytes: bytes %d–%d of a line cross into the next (conn at %d of its line)",
				from%64, from%64+(to-from), uintptr(unsafe.Pointer(c))%64)
		}
	}
}

// TestConnSizeClass holds a conn, with the runtime's 8-byte malloc header,
// to its 640-byte size class: the line ends bufferedHead notes for the
// parse (lineEnds) took the room that was left, and a conn is kept per
// open connection.
func TestConnSizeClass(t *testing.T) {
	const mallocHeader = 8
	if got := unsafe.Sizeof(conn{}) + mallocHeader; got > 640 {
		t.Fatalf("a conn takes %d bytes with its malloc header, past its 640-byte size class", got)
	}
}
