//go:build linux && !race

package sockio

import (
	"syscall"
	"unsafe"
)

// rawIO: plaintext TCP sockets are read and written with rawRead and
// rawWrite. Not under the race detector: syscall.Read and syscall.Write
// tell it that a write to a socket happens before the read of it, and
// raw calls do not, so tests that hand data over a socket would report
// races that are none.
const rawIO = true

// rawRead and rawWrite are read(2) and write(2) on a non-blocking socket
// without the runtime's syscall bookkeeping (see the package doc).
func rawRead(fd uintptr, p []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	return int(n), e
}

func rawWrite(fd uintptr, p []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	return int(n), e
}

// rawPeek is a non-blocking recv(2) with MSG_PEEK: EAGAIN when nothing is
// pending, 0 when bytes or the end of stream are.
func rawPeek(fd uintptr, p []byte) syscall.Errno {
	_, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)),
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	return e
}
