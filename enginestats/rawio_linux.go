package enginestats

import (
	"errors"
	"net"
	"syscall"
	"unsafe"
)

// rawIO: a getter's socket is detached from the runtime's poller and read
// and written with rawRead and rawWrite.
const rawIO = true

// detach takes c's socket off the runtime's poller: it returns a
// close-on-exec duplicate of its descriptor (non-blocking, as the runtime
// made it); the caller then closes c, which removes the original from the
// poller while the socket stays open through the duplicate.
func detach(c net.Conn) (int, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return -1, errors.ErrUnsupported
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd, derr := -1, error(nil)
	if err := rc.Control(func(f uintptr) {
		r, _, e := syscall.Syscall(syscall.SYS_FCNTL, f, syscall.F_DUPFD_CLOEXEC, 0)
		if e != 0 {
			derr = e
			return
		}
		fd = int(r)
	}); err != nil {
		return -1, err
	}
	return fd, derr
}

// rawRead and rawWrite are read(2) and write(2) on a non-blocking socket
// without the runtime's syscall bookkeeping. They never block (EAGAIN
// instead), so the bookkeeping buys nothing here, and it costs: the first
// syscall after the process went idle wakes the runtime's monitor thread,
// which then polls every 20 µs for the rest of the burst (measured: one
// nanosleep per scrape; see TestScrapeCost).
func rawRead(fd uintptr, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

func rawWrite(fd uintptr, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
