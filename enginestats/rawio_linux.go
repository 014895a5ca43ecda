package enginestats

import (
	"errors"
	"net"
	"syscall"
)

// rawIO: a getter's socket is detached from the runtime's poller and read
// and written with rawRead and rawWrite.
const rawIO = true

// detach takes c's socket off the runtime's poller: it returns a
// close-on-exec, non-blocking duplicate of its descriptor; the caller then
// closes c, which removes the original from the poller while the socket
// stays open through the duplicate. The duplicate shares the original's
// file status flags, so it is non-blocking already (the runtime made it
// so); detach sets the flag anyway, because a blocking descriptor would
// turn rawRead into a read that holds its thread, its processor and the
// socket's mutex until the engine answers, stopping the scheduler and any
// stop-the-world pause of the whole process with it.
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
	if derr != nil {
		return -1, derr
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		_ = syscall.Close(fd)
		return -1, err
	}
	return fd, nil
}
