package enginestats

import (
	"syscall"
	"unsafe"
)

// rawIO: a getter reads and writes its socket with rawRead and rawWrite.
const rawIO = true

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
