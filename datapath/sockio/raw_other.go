//go:build !linux || race

package sockio

import (
	"errors"
	"syscall"
)

// rawIO: elsewhere (and under the race detector) every connection is read
// and written through net.Conn; Quiet still peeks at plaintext sockets.
const rawIO = false

func rawRead(uintptr, []byte) (int, syscall.Errno)  { return 0, syscall.ENOSYS }
func rawWrite(uintptr, []byte) (int, syscall.Errno) { return 0, syscall.ENOSYS }

func rawWritev(uintptr, []byte, []byte, []byte) (int, syscall.Errno) { return 0, syscall.ENOSYS }

// rawPeek is a non-blocking recv(2) with MSG_PEEK through the syscall
// package (which tells the race detector about it).
func rawPeek(fd uintptr, p []byte) syscall.Errno {
	_, _, err := syscall.Recvfrom(int(fd), p, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return 0
}
