//go:build linux && !race

package sockio

import (
	"syscall"

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

func rawWritev(fd uintptr, a, b, c []byte) (int, syscall.Errno) { return rawsock.Writev(fd, a, b, c) }
