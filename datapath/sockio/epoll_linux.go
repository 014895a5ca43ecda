//go:build linux

package sockio

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
	"unsafe"
)

// Epoll is an epoll set whose waits park on Go's netpoller instead of
// blocking a thread in epoll_wait(2). Why: while any thread blocks in a
// system call, the runtime's monitor thread (sysmon) keeps waking to hand
// that thread's processor on, and every wake-up is a context switch: the
// two watchers (HupWatcher and h1's departure watcher) blocked that way
// measured 0.05–0.14 nanosleeps per small request, against 0.007–0.020
// waiting here (two perf stat sets, docs/performance.md). An epoll
// descriptor is itself pollable, so the netpoller reports when the set
// has events and Wait then collects them with a zero-timeout
// epoll_pwait(2).
//
// The *os.File owns the descriptor: Close closes it once, ending a Wait
// in progress, and Ctl runs under the file's reference count, so a closed
// set's number can never be mistaken for a descriptor opened since.
type Epoll struct {
	f  *os.File
	rc syscall.RawConn
}

// NewEpoll creates an empty set (close-on-exec, non-blocking).
func NewEpoll() (*Epoll, error) {
	fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		_ = syscall.Close(fd)
		return nil, fmt.Errorf("epoll set non-blocking: %w", err)
	}
	f := os.NewFile(uintptr(fd), "epoll")
	rc, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("epoll raw conn: %w", err)
	}
	return &Epoll{f: f, rc: rc}, nil
}

// Ctl is epoll_ctl(2) on the set for fd.
func (e *Epoll) Ctl(op, fd int, ev *syscall.EpollEvent) error {
	var err error
	if cerr := e.rc.Control(func(efd uintptr) { err = syscall.EpollCtl(int(efd), op, fd, ev) }); cerr != nil {
		return cerr
	}
	return err
}

// Wait fills events with the set's ready events, waiting at most d for
// the first; 0 and no error when d passed with none. Once Close has
// begun it returns an error (with 0 events), never EINTR.
func (e *Epoll) Wait(events []syscall.EpollEvent, d time.Duration) (int, error) {
	var n int
	err := e.wait(events, d, func(r int) bool {
		n = r
		return true
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// WaitEach hands every batch of ready events to handle from inside one
// netpoller read wait, until d passes (nil) or the set fails. Why not
// Wait in a loop: each Wait starts with an epoll_pwait, so a loop that
// drained the set asks once more, finds nothing and parks (two calls a
// batch); inside one wait the readiness the poller records while handle
// works is kept, so after a batch shorter than events (the set drained)
// it parks at once, and wakes at once if more came meanwhile.
func (e *Epoll) WaitEach(events []syscall.EpollEvent, d time.Duration, handle func([]syscall.EpollEvent)) error {
	return e.wait(events, d, func(r int) bool {
		handle(events[:r])
		return false
	})
}

// wait runs epoll_pwait inside one netpoller read wait until got, given
// each batch's size, returns true or d passes (nil). After a batch that
// did not fill events the set is drained: the wait parks until the next
// readiness without asking again.
func (e *Epoll) wait(events []syscall.EpollEvent, d time.Duration, got func(n int) (stop bool)) error {
	if err := e.f.SetReadDeadline(time.Now().Add(d)); err != nil {
		return err
	}
	var errno syscall.Errno
	err := e.rc.Read(func(efd uintptr) bool {
		for {
			r, _, en := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, efd,
				uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
			switch {
			case en == syscall.EINTR:
				continue // not an answer: parking now could sleep past ready events
			case en != 0:
				errno = en
				return true
			case r == 0:
				return false // nothing ready: park on the netpoller
			}
			if got(int(r)) {
				return true
			}
			if int(r) < len(events) {
				return false // drained: the next readiness wakes the wait
			}
		}
	})
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil
	case err != nil:
		return err
	case errno != 0:
		return errno
	}
	return nil
}

// Close closes the set; a Wait in progress returns.
func (e *Epoll) Close() error { return e.f.Close() }
