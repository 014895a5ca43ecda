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

// Writev is writev(2) of a, b and c on fd, in that order, as Write is
// write(2): the count, or 0 and the errno; EINTR is retried. An empty
// piece is an empty iovec, which writev skips. Three pieces because that
// is a chunk's frame (size line, data, CRLF) and a fixed array keeps the
// iovecs, and the pieces, off the heap.
func Writev(fd uintptr, a, b, c []byte) (int, syscall.Errno) {
	iov := [3]syscall.Iovec{{Base: unsafe.SliceData(a)}, {Base: unsafe.SliceData(b)}, {Base: unsafe.SliceData(c)}}
	iov[0].SetLen(len(a))
	iov[1].SetLen(len(b))
	iov[2].SetLen(len(c))
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
		switch e {
		case 0:
			return int(n), 0
		case syscall.EINTR:
			continue
		}
		return 0, e
	}
}

// Peek is a non-blocking recv(2) with MSG_PEEK into p (at least one byte):
// EAGAIN when nothing is pending, 0 when bytes or the end of stream are.
func Peek(fd uintptr, p []byte) syscall.Errno {
	_, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)),
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	return e
}
