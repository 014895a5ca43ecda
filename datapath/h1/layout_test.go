package h1

import (
	"testing"
	"unsafe"
)

// TestConnLayout holds the cache-line layout a relayed SSE event relies
// on (conn.go): the connection's write buffer pointer shares a line with
// the first 40 bytes of its sockio.Conn (what a write in the read wait
// reads), and conn is over 512 bytes, so its size class starts every
// object on a line.
func TestConnLayout(t *testing.T) {
	var c conn
	if size := unsafe.Sizeof(c); size <= 512 {
		t.Errorf("conn is %d bytes: its size class may not start objects on a line", size)
	}
	from, to := unsafe.Offsetof(c.bw), unsafe.Offsetof(c.sock)+40
	if from/64 != (to-1)/64 {
		t.Errorf("conn.bw and sock's first 40 bytes: bytes %d–%d cross a cache line", from, to)
	}
}
