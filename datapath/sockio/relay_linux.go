//go:build linux

package sockio

import (
	"io"
	"sync"
	"sync/atomic"
	"syscall"
)

// Why read inside one wait: Go's poller forgets a socket's readiness each
// time a read starts (syscall.RawConn.Read clears it before it calls
// back), so a relay that returns from its read and reads again later must
// start every wait with a read that finds the socket empty: one wasted
// syscall per relayed event. Staying inside one RawConn.Read for the
// whole stream keeps the readiness the poller records while the callback
// works, so the callback can read, hand the bytes on and wait again
// without looking first: nginx's shape (read until a short read, then the
// next edge).

// CanReadEach reports whether ReadEach can run on c: a plaintext TCP
// socket under it.
func (c *Conn) CanReadEach() bool { return c.raw != nil }

// ReadEach reads c until h stops it, the peer ends the stream (io.EOF) or
// a read fails, handing every read's bytes to h from inside one poll wait:
// after a read shorter than the buffer (the socket drained) it waits for
// the next readiness without reading again, so no wait but the first
// starts with a read that finds nothing. A hang-up that came with the last
// bytes is learnt from w (nil, or a watcher that cannot take the socket:
// every read is followed by reads to EAGAIN), or from a loop's own
// registration while st.Loops reads (w takes the socket only if the
// stream leaves the loop before its end). h.Handle may block (on a
// write elsewhere, which is the relay's backpressure): the socket is not
// read meanwhile. The read deadline and Abort end a wait as they end a
// Read (an armed deadline earlier than the one asked for is re-armed and
// the reads go on); Abort also stops the reads between waits. An error
// from h.Handle is returned as is; h.Idle has run before ReadEach returns.
// st holds the loop's state (nil: ReadEach allocates it); it must not be
// in use by another ReadEach.
func (c *Conn) ReadEach(h ReadHandler, w *HupWatcher, st *EachState) error {
	if c.raw == nil {
		return errNoSocket
	}
	if st == nil {
		st = new(EachState)
	}
	op := &st.op
	op.eachRun = eachRun{c: c, h: h}
	defer h.Idle()
	if st.Loops != nil && rawIO {
		// No hang-up watcher meanwhile: the loop's own registration
		// reports a hang-up with the bytes it came with (loopRun).
		op.client = st.Client
		ended, rerr := c.readEachInLoop(st.Loops, op, st.Detach)
		err := op.flushStash()
		op.stalled = false // on in this goroutine's waits
		if err != nil {
			return err
		}
		if rerr != nil {
			return rerr
		}
		if ended {
			return op.outcome()
		}
	}
	if w == nil {
		op.drain = true
	} else if !op.drain {
		_ = c.raw.Control(func(fd uintptr) {
			var ok bool
			op.hupID, ok = w.watch(op, fd)
			op.drain = !ok
		})
		if !op.drain {
			defer w.unwatch(op.hupID)
		}
	}
	fn := op.run // bound once per stream
	woke := false
	for {
		c.unanswered = false
		err := c.raw.Read(fn)
		if err == nil {
			break
		}
		if op.hup.Load() && !woke {
			// The watcher's past deadline woke the wait: read to the end.
			woke, op.drain = true, true
			if err := c.arm(c.want); err != nil {
				return err
			}
			continue
		}
		if !c.early(err) {
			return err // a deadline, Abort or Close, as Read reports them
		}
		if err := c.arm(c.want); err != nil {
			return err
		}
	}
	if op.hup.Load() && !woke {
		_ = c.arm(c.want) // the watcher's past deadline must not outlive the loop
	}
	return op.outcome()
}

// outcome is ReadEach's answer once op's callback ended the reads.
func (op *eachOp) outcome() error {
	switch {
	case op.errno != 0:
		return op.c.opError("read", op.errno)
	case op.eof:
		return io.EOF
	}
	return op.err
}

// eachOp is one ReadEach's state, shared with its RawConn callback; what
// a wake-up reads comes first.
type eachOp struct {
	eachRun
	loopState
}

// eachRun is what each ReadEach starts afresh.
type eachRun struct {
	h ReadHandler
	// drain: read on to EAGAIN after a short read (no watcher, or the
	// peer hung up); hup: the watcher saw the hang-up.
	drain bool
	hup   atomic.Bool
	eof   bool
	c     *Conn
	errno syscall.Errno
	err   error // h.Handle's
	hupID uint64
}

// loopState is a ReadEach's place in a Loops set (loop_linux.go), kept
// from one ReadEach on the state to the next: a loop may hold the state
// for a moment after its stream left (the id it checks under loopMu no
// longer matches), so loopMu is never written over. loopMu orders the
// loop's callbacks and the stream's leaving; loopID is its entry (0: out).
type loopState struct {
	loopMu  sync.Mutex
	loopFD  uintptr
	loopID  uint64
	ended   bool          // the callback ended the reads
	stalled bool          // a client write was stashed: leave the loop
	woken   chan struct{} // the stream's goroutine's wake-up
	client  *Conn         // the connection the handler writes, its writes stashed
	tail    []byte        // the stash
	lent    []byte        // the loop's read buffer while its callback runs (nil: the handler's)
	readAt  Mono          // the loop's clock reading of the batch while its callback runs (NoDeadline: none)
}

// ReadAt is when the bytes being handled were read, as the loop that
// read them saw the clock once for its batch of ready streams, while a
// ReadHandler's Handle runs from a loop (EachState.Loops); NoDeadline
// otherwise (the handler reads the clock itself if it needs the time).
// Why: a relay that times each event read the clock per event (~80
// instructions; callgrind, irsse.sh), the loop once per batch.
func (st *EachState) ReadAt() Mono { return st.op.readAt }

// run is ReadEach's RawConn callback: read, hand on, and return false (the
// wait) after a short read or EAGAIN; true ends the RawConn.Read.
//
// Abort is looked at only before reading on without a wait: each call
// follows a look at the socket's deadlines (the poller's, before the first
// call and after every wake-up), which Abort's past deadline fails. Why
// not at every call: with 1,000 streams the Conn's line holding the flag
// is cold at each event's wake-up, and that one load was half of run's
// own time.
//
// From a loop (op.lent set) the handler's Buffer is never asked for, so
// its Idle is not called either: two interface calls and the relay
// buffer's check per relayed event (~25 instructions, callgrind) that
// would find nothing to give back.
func (op *eachOp) run(fd uintptr) bool {
	for {
		p := op.lent
		if p == nil {
			p = op.h.Buffer()
		}
		var n int
		var errno syscall.Errno
		if rawIO {
			n, errno = rawRead(fd, p) // inlined: relayRead's frame per event saved
		} else {
			n, errno = syscallRead(fd, p)
		}
		switch errno {
		case 0:
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			op.idle()
			return false
		default:
			op.errno = errno
			return true
		}
		if n == 0 {
			op.eof = true
			return true
		}
		more, err := op.h.Handle(p[:n])
		if !more {
			op.err = err
			return true
		}
		if op.stalled {
			op.idle() // a client write waits: the stream leaves the loop
			return false
		}
		if n < len(p) && !op.drain && !op.hup.Load() {
			// Drained: bytes that come after this read mark the socket
			// ready again (the wait below returns at once).
			op.idle()
			return false
		}
		if op.c.aborted.Load() {
			// Abort's past deadline ends the wait at once (or as soon as
			// Abort sets it): the error is the wait's to report.
			op.idle()
			return false
		}
	}
}

// idle tells the handler its buffer is not needed until the next read,
// unless the reads use the loop's buffer (the handler lent none).
func (op *eachOp) idle() {
	if op.lent == nil {
		op.h.Idle()
	}
}

// syscallRead is read(2) through package syscall, which tells the race
// detector about the socket's bytes (rawIO is false).
func syscallRead(fd uintptr, p []byte) (int, syscall.Errno) {
	n, err := syscall.Read(int(fd), p)
	if err != nil {
		if errno, ok := err.(syscall.Errno); ok { //nolint:errorlint // syscall.Read returns a bare Errno
			return 0, errno
		}
		return 0, syscall.EIO
	}
	return n, 0
}
