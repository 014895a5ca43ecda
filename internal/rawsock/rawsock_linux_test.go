//go:build linux

package rawsock

import (
	"syscall"
	"testing"
)

// socketPair returns two connected non-blocking stream sockets, closed at
// the test's end.
func socketPair(t *testing.T) (a, b int) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("socketpair: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Close(fds[0]); _ = syscall.Close(fds[1]) })
	return fds[0], fds[1]
}

// TestCalls drives each call over a real socket pair in the states the
// datapath meets: nothing pending, bytes pending, the peer gone.
func TestCalls(t *testing.T) {
	tests := []struct {
		name      string
		send      string // written by the peer first
		closePeer bool
		wantPeek  syscall.Errno
		wantRead  string
		wantErrno syscall.Errno // Read's
	}{
		{name: "empty", wantPeek: syscall.EAGAIN, wantErrno: syscall.EAGAIN},
		{name: "bytes", send: "GET / HTTP/1.1\r\n", wantRead: "GET / HTTP/1.1\r\n"},
		{name: "end of stream", closePeer: true},
		{name: "bytes then end", send: "x", closePeer: true, wantRead: "x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := socketPair(t)
			if tt.send != "" {
				if n, e := Write(uintptr(b), []byte(tt.send)); e != 0 || n != len(tt.send) {
					t.Fatalf("Write = %d, %v; want %d, 0", n, e, len(tt.send))
				}
			}
			if tt.closePeer {
				_ = syscall.Shutdown(b, syscall.SHUT_WR)
			}
			var one [1]byte
			if e := Peek(uintptr(a), one[:]); e != tt.wantPeek {
				t.Errorf("Peek = %v, want %v", e, tt.wantPeek)
			}
			buf := make([]byte, 64)
			n, e := Read(uintptr(a), buf)
			if e != tt.wantErrno || string(buf[:n]) != tt.wantRead {
				t.Errorf("Read = %q, %v; want %q, %v", buf[:n], e, tt.wantRead, tt.wantErrno)
			}
		})
	}
}

// TestEmptyBufferMakesNoCall: a zero-length read must not report a zero
// count from the kernel, which a caller would take for the end of stream,
// even on a descriptor that is not open.
func TestEmptyBufferMakesNoCall(t *testing.T) {
	const notOpen = ^uintptr(0)
	if n, e := Read(notOpen, nil); n != 0 || e != 0 {
		t.Errorf("Read(nil) = %d, %v; want 0, 0 with no call", n, e)
	}
	if n, e := Write(notOpen, nil); n != 0 || e != 0 {
		t.Errorf("Write(nil) = %d, %v; want 0, 0 with no call", n, e)
	}
}

// TestWritev: the three pieces arrive in order as one stream, empty
// pieces skipped; a full socket is EAGAIN with nothing written.
func TestWritev(t *testing.T) {
	tests := []struct {
		name    string
		a, b, c string
	}{
		{name: "chunk frame", a: "5\r\n", b: "hello", c: "\r\n"},
		{name: "empty data", a: "0\r\n", c: "\r\n"},
		{name: "all empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := socketPair(t)
			want := tt.a + tt.b + tt.c
			if n, e := Writev(uintptr(a), []byte(tt.a), []byte(tt.b), []byte(tt.c)); e != 0 || n != len(want) {
				t.Fatalf("Writev = %d, %v; want %d, 0", n, e, len(want))
			}
			buf := make([]byte, 64)
			n, e := Read(uintptr(b), buf)
			if want == "" {
				if e != syscall.EAGAIN {
					t.Fatalf("Read after an empty Writev = %q, %v; want EAGAIN", buf[:n], e)
				}
				return
			}
			if e != 0 || string(buf[:n]) != want {
				t.Fatalf("Read = %q, %v; want %q", buf[:n], e, want)
			}
		})
	}
	t.Run("full socket", func(t *testing.T) {
		a, _ := socketPair(t)
		big := make([]byte, 1<<16)
		for i := 0; i < 1<<10; i++ { // bounded: a socket pair's buffer fills in a few
			if _, e := Write(uintptr(a), big); e == syscall.EAGAIN {
				break
			}
		}
		if n, e := Writev(uintptr(a), []byte("x"), big, nil); e != syscall.EAGAIN || n != 0 {
			t.Fatalf("Writev on a full socket = %d, %v; want 0, EAGAIN", n, e)
		}
	})
}
