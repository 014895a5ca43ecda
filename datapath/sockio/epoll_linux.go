//go:build linux

package sockio

import (
	"errors"
	"fmt"
	"os"
	"sync"
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
// in progress. Ctl uses the number under mu's read lock and Close marks
// the set closed under its write lock before closing the file, so a
// closed set's number can never be mistaken for a descriptor opened
// since. Why not the file's RawConn.Control, which guarantees the same:
// its callback escapes through the interface, an allocation per call;
// with Control's own work and the runtime's system call entry ~720
// instructions a call against ~65 (callgrind, irsse.sh), and a loop's
// stream makes three.
//
// Wait and WaitEach are for one goroutine at a time (each user has one
// waiting loop): their callback and its state are made once, in the set,
// so a wait allocates nothing (four allocations a Wait before).
type Epoll struct {
	f  *os.File
	rc syscall.RawConn
	fd int

	mu     sync.RWMutex
	closed bool // Close has begun: fd is not to be used

	// The waiter's state, read by readFn (made once by NewEpoll).
	readFn func(efd uintptr) bool
	events []syscall.EpollEvent
	handle func([]syscall.EpollEvent) // nil: Wait's, which stops at the first batch
	n      int                        // Wait's batch
	errno  syscall.Errno
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
	e := &Epoll{f: f, rc: rc, fd: fd}
	e.readFn = e.read
	return e, nil
}

// errEpollClosed is Ctl's error on a set Close has closed.
var errEpollClosed = fmt.Errorf("epoll_ctl: %w", os.ErrClosed)

// Ctl is epoll_ctl(2) on the set for fd. epoll_ctl does not block, so it
// is made without the runtime's system call bookkeeping.
func (e *Epoll) Ctl(op, fd int, ev *syscall.EpollEvent) error {
	e.mu.RLock()
	if e.closed {
		e.mu.RUnlock()
		return errEpollClosed
	}
	_, _, errno := syscall.RawSyscall6(syscall.SYS_EPOLL_CTL, uintptr(e.fd), uintptr(op), uintptr(fd), uintptr(unsafe.Pointer(ev)), 0, 0)
	e.mu.RUnlock()
	if errno != 0 {
		return errno
	}
	return nil
}

// Wait fills events with the set's ready events, waiting at most d for
// the first; 0 and no error when d passed with none. Once Close has
// begun it returns an error (with 0 events), never EINTR.
func (e *Epoll) Wait(events []syscall.EpollEvent, d time.Duration) (int, error) {
	return e.wait(events, d, nil)
}

// WaitEach hands every batch of ready events to handle from inside one
// netpoller read wait, until d passes (nil) or the set fails. Why not
// Wait in a loop: each Wait starts with an epoll_pwait, so a loop that
// drained the set asks once more, finds nothing and parks (two calls a
// batch); inside one wait the readiness the poller records while handle
// works is kept, so after a batch shorter than events (the set drained)
// it parks at once, and wakes at once if more came meanwhile.
func (e *Epoll) WaitEach(events []syscall.EpollEvent, d time.Duration, handle func([]syscall.EpollEvent)) error {
	_, err := e.wait(events, d, handle)
	return err
}

// wait runs epoll_pwait inside one netpoller read wait: with handle nil,
// until the first batch, whose size it returns; else handing each batch
// to handle until d passes (nil). After a batch that did not fill events
// the set is drained: the wait parks until the next readiness without
// asking again.
func (e *Epoll) wait(events []syscall.EpollEvent, d time.Duration, handle func([]syscall.EpollEvent)) (int, error) {
	if err := e.f.SetReadDeadline(time.Now().Add(d)); err != nil {
		return 0, err
	}
	e.events, e.handle, e.n, e.errno = events, handle, 0, 0
	err := e.rc.Read(e.readFn)
	n, errno := e.n, e.errno
	e.events, e.handle = nil, nil
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return 0, nil
	case err != nil:
		return 0, err
	case errno != 0:
		return 0, errno
	}
	return n, nil
}

// read is wait's callback to the netpoller's read wait (readFn): it
// collects batches into e.events until one answers the wait (true) or
// none is ready (false: park).
func (e *Epoll) read(efd uintptr) bool {
	for {
		r, _, en := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, efd,
			uintptr(unsafe.Pointer(&e.events[0])), uintptr(len(e.events)), 0, 0, 0)
		switch {
		case en == syscall.EINTR:
			continue // not an answer: parking now could sleep past ready events
		case en != 0:
			e.errno = en
			return true
		case r == 0:
			return false // nothing ready: park on the netpoller
		}
		if e.handle == nil {
			e.n = int(r)
			return true
		}
		e.handle(e.events[:r])
		if int(r) < len(e.events) {
			return false // drained: the next readiness wakes the wait
		}
	}
}

// Close closes the set; a Wait in progress returns.
func (e *Epoll) Close() error {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	return e.f.Close()
}
