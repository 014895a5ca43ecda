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
