//go:build linux

package rawsock

import (
	"syscall"
	"unsafe"
)

// Supported: the calls below are real on this platform.
const Supported = true

// Read is read(2) on fd: the count, or 0 and the errno. An empty p makes
// no call (a zero count would read as the end of stream).
func Read(fd uintptr, p []byte) (int, syscall.Errno) {
	if len(p) == 0 {
		return 0, 0
	}
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), 0
}

// Write is write(2) on fd: the count, or 0 and the errno. An empty p makes
// no call.
func Write(fd uintptr, p []byte) (int, syscall.Errno) {
	if len(p) == 0 {
		return 0, 0
	}
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), 0
}

// Peek is a non-blocking recv(2) with MSG_PEEK into p (at least one byte):
// EAGAIN when nothing is pending, 0 when bytes or the end of stream are.
func Peek(fd uintptr, p []byte) syscall.Errno {
	_, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)),
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	return e
}
