package upstream

import (
	"bufio"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"unsafe"
)

// TestResponseSizeClass: the response, with its room for the head, fills
// the 768-byte size class and no more (a larger one costs every answer;
// much room left over is room a longer head could have used).
func TestResponseSizeClass(t *testing.T) {
	// An object over 512 bytes that holds pointers carries an 8-byte
	// header of its type in front (the runtime's malloc header).
	const mallocHeader = 8
	if n := unsafe.Sizeof(response{}); n+mallocHeader != 768 {
		t.Fatalf("response is %d bytes (+%d of header), want 768 with it (the whole 768-byte size class)", n, mallocHeader)
	}
	if off := unsafe.Offsetof(response{}.head); off+headRoom != unsafe.Sizeof(response{}) {
		t.Fatalf("head at %d of %d: want it last, so the collector's scan stops before it", off, unsafe.Sizeof(response{}))
	}
}

// TestHeadString: a head that fits is copied into the room, one that does
// not gets a string of its own; either way the string is a copy that later
// writes to the buffer it came from do not change.
func TestHeadString(t *testing.T) {
	tests := []struct {
		name   string
		n      int
		inRoom bool
	}{
		{"empty", 0, false},
		{"short", 17, true},
		{"exactly the room", headRoom, true},
		{"one past the room", headRoom + 1, false},
		{"long", 4 * headRoom, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var room [headRoom]byte
			b := []byte(strings.Repeat("h", tt.n))
			got := headString(b, &room)
			for i := range b {
				b[i] = 'x' // the read buffer, reused
			}
			if got != strings.Repeat("h", tt.n) {
				t.Fatalf("head changed with its source: %q", got)
			}
			if inRoom := unsafe.StringData(got) == &room[0]; inRoom != tt.inRoom {
				t.Fatalf("in the room: %v, want %v", inRoom, tt.inRoom)
			}
		})
	}
}

// TestReadHeadRoom: each answer's head strings live in its own response's
// room (a short head) or string (a long one), so a second answer read
// from the same buffer leaves the first one's header values as they were.
func TestReadHeadRoom(t *testing.T) {
	long := "X-Long: " + strings.Repeat("l", headRoom) + "\r\n"
	tests := []struct {
		name, first, second string
	}{
		{"short, short", "X-A: first\r\n", "X-A: second\r\n"},
		{"long, short", long + "X-A: first\r\n", "X-A: second\r\n"},
		{"short, long", "X-A: first\r\n", long + "X-A: second\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw := "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n" + tt.first + "\r\n" +
				"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n" + tt.second + "\r\n"
			br := bufio.NewReader(strings.NewReader(raw))
			r1, _, err := readResponse(br, http.MethodPost, nil)
			if err != nil {
				t.Fatal(err)
			}
			r2, _, err := readResponse(br, http.MethodPost, nil)
			if err != nil {
				t.Fatal(err)
			}
			if a, b := r1.Header.Get("X-A"), r2.Header.Get("X-A"); a != "first" || b != "second" {
				t.Fatalf("X-A: %q, %q; want first, second", a, b)
			}
		})
	}
}

// TestResponseBatchSizeClass: a batch of responses, with its malloc
// header, fits the 3072-byte size class (a larger one would cost every
// fourth answer and the memory a kept answer pins).
func TestResponseBatchSizeClass(t *testing.T) {
	const mallocHeader = 8
	if n := unsafe.Sizeof(responseBatch{}) + mallocHeader; n > 3072 {
		t.Fatalf("a response batch takes %d bytes with its header, past the 3072-byte size class", n)
	}
}

// TestNewResponse hands out answers past several batches and checks that
// each is zeroed and its own: one written to after it was handed out is
// never handed out again (a batch reused or its index not advanced fails).
func TestNewResponse(t *testing.T) {
	for _, n := range []int{1, 4, 5, 9, 13} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			c := &Client{}
			seen := make(map[*response]bool)
			for i := range n {
				ur := c.newResponse()
				if seen[ur] {
					t.Fatalf("answer %d handed out twice", i)
				}
				seen[ur] = true
				if ur.resp.StatusCode != 0 || ur.head[0] != 0 {
					t.Fatalf("answer %d not zeroed: status %d", i, ur.resp.StatusCode)
				}
				ur.resp.StatusCode, ur.head[0] = 200+i, 'x' // as a parse would
			}
		})
	}
}
