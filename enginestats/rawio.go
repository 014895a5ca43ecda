package enginestats

import (
	"syscall"

	"github.com/infergate/infergate/internal/rawsock"
)

// rawRead and rawWrite are read(2) and write(2) on a detached socket
// without the runtime's syscall bookkeeping (internal/rawsock, shared with
// the datapath's socket layer). They never block (EAGAIN instead), so the
// bookkeeping buys nothing here, and it costs: the first syscall after the
// process went idle wakes the runtime's monitor thread, which then polls
// every 20 µs for the rest of the burst (measured: one nanosleep per
// scrape; see TestScrapeCost). Outside Linux they fail (rawIO is false
// there, so nothing calls them).
func rawRead(fd uintptr, p []byte) (int, error) { return errnoErr(rawsock.Read(fd, p)) }

func rawWrite(fd uintptr, p []byte) (int, error) { return errnoErr(rawsock.Write(fd, p)) }

// errnoErr turns a zero errno into a nil error (a zero Errno is a non-nil
// error value).
func errnoErr(n int, e syscall.Errno) (int, error) {
	if e != 0 {
		return 0, e
	}
	return n, nil
}
