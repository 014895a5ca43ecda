//go:build linux && !race

package sockio

import (
	"syscall"
	"unsafe"

	"github.com/infergate/infergate/internal/rawsock"
)

// rawIO: plaintext TCP sockets are read and written with rawRead and
// rawWrite. Not under the race detector: syscall.Read and syscall.Write
// tell it that a write to a socket happens before the read of it, and
// raw calls do not, so tests that hand data over a socket would report
// races that are none.
const rawIO = true

// rawRead, rawWrite and rawPeek are read(2), write(2) and a non-blocking
// MSG_PEEK recv(2) without the runtime's syscall bookkeeping (see the
// package doc); rawPeek is EAGAIN when nothing is pending, 0 when bytes or
// the end of stream are.
func rawRead(fd uintptr, p []byte) (int, syscall.Errno)  { return rawsock.Read(fd, p) }
func rawWrite(fd uintptr, p []byte) (int, syscall.Errno) { return rawsock.Write(fd, p) }
func rawPeek(fd uintptr, p []byte) syscall.Errno         { return rawsock.Peek(fd, p) }

// rawWritev is writev(2) of a, b and c on fd, as rawWrite is write(2):
// the count, or 0 and the errno; EINTR is retried. An empty piece is an
// empty iovec, which writev skips.
func rawWritev(fd uintptr, a, b, c []byte) (int, syscall.Errno) {
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
