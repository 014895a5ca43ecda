package sockio

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// A Conn's hang-up watch states (hupWatch).
const (
	hupNone    uint8 = iota // not registered yet
	hupWatched              // in the watcher's set
	hupFailed               // none, or it could not take the socket, or stopped
)

// Whether and how the last read in Hold's step showed the socket empty.
const (
	drainNone   uint8 = iota // it did not: a full read, or none yet
	drainShort               // fewer bytes than asked for
	drainEAGAIN              // none at all
)

// aLongTimeAgo is a deadline in the past: it unblocks pending I/O at once.
var aLongTimeAgo = time.Unix(1, 0)

// ErrWouldBlock is what Read reports inside Hold's step when the socket is
// empty: the step then returns true to wait for it.
var ErrWouldBlock = errors.New("sockio: read would block")

// Conn reads and writes nc. Read, Write and the deadline setters belong to
// the connection's owner (one goroutine at a time); Abort may run on any
// goroutine. Deadlines for what goes through c are set through c: one set
// on nc directly is taken for an early lazy one when it passes, and lifted.
type Conn struct {
	// What a Write inside Hold's step touches comes first, on one line
	// where the embedding struct allows (a relayed SSE event's client
	// write: with 1,000 streams each line is a cache miss per event).
	raw syscall.RawConn // the plaintext TCP socket under nc, or nil
	// written counts the bytes the socket took from Write (PeerAcked's
	// reference).
	written uint64
	holdFD  uintptr // the socket, while a step runs
	aborted atomic.Bool
	holding bool // a step runs: Read reads in place, never waits
	// unanswered: a Write since the last read or Quiet. The peer may have
	// answered it already, and a reply in before a wait does not wake it.
	unanswered bool
	awaitReply bool // AwaitReply: Write waits for the socket to be readable

	nc net.Conn
	// ncMu orders a change of nc (a ReadEach from a loop moves the socket
	// to a new net.Conn, detach_linux.go) with Abort, which may run on any
	// goroutine; the owner reads nc without it.
	ncMu sync.Mutex

	// The read and the write in progress on the raw socket, and the
	// callbacks bound once (a closure per call would allocate).
	rd, wr       rawOp
	readFn, wrFn func(fd uintptr) bool
	peekFn       func(fd uintptr) bool // Quiet's
	waitFn       func(fd uintptr) bool // WaitReadable's
	replyFn      func(fd uintptr) bool // writeAwaitReply's
	replyOut     func()                // ReleaseOnReplyWait's
	replyIn      func() bool           // ReadOnReply's
	holdFn       func(fd uintptr) bool // Hold's
	holdStep     func() bool           // Hold's caller's step
	drained      uint8                 // drainNone, drainShort, drainEAGAIN
	// hup is the connection's place in a hang-up watcher's set, for one
	// use or the other: Hold's (WatchHangUp: a FIN queued with the last
	// bytes read is reported by their readiness alone, so a short read
	// proves the socket empty only while the watcher would report a FIN),
	// or a pooled engine connection's for its whole life (WatchPeer).
	hup         hupWatch
	peekBuf     [1]byte
	waitPeeked  bool // waitRaw has peeked: its next call follows a wake-up
	replyWrote  bool // replyRaw has written: its next call follows a wake-up
	want, armed Mono // read deadline asked for, and set on the socket
	// The write deadline asked for and set on the socket: lazy like the
	// read one on the raw socket (a write there resumes where it stopped);
	// set as asked through nc (a TLS write that timed out cannot resume).
	wantWrite, armedWrite Mono

	// A ReadEach run by a Loops set: loopOp on the connection it reads
	// (Abort wakes its wait), stash on the one its handler writes (a
	// write that would block is kept for the stream's goroutine).
	loopOp atomic.Pointer[eachOp]
	stash  *eachOp
}

// rawOp is one read(2) or write(2) loop on the raw socket.
type rawOp struct {
	p     []byte
	n     int
	errno syscall.Errno
}

// New returns a Conn over nc. Raw socket calls are used when nc, followed
// through NetConn(), is a *net.TCPConn (on Linux, outside the race
// detector) and no layer on the way is a *tls.Conn (other wrappers that
// expose NetConn must not change what Read and Write do); anything else
// (TLS, pipes) is read and written through nc.
func New(nc net.Conn) *Conn {
	c := &Conn{}
	c.Reset(nc)
	return c
}

// Reset makes c a Conn over nc (in place, for a struct embedding one).
func (c *Conn) Reset(nc net.Conn) {
	*c = Conn{nc: nc}
	c.raw = plainTCP(nc)
	c.readFn, c.wrFn, c.peekFn, c.waitFn = c.readRaw, c.writeRaw, c.peekRaw, c.waitRaw
	c.replyFn, c.holdFn = c.replyRaw, c.holdRaw
}

// NetConn is the connection c reads and writes: after a stream relayed
// from a loop with EachState.Detach, a new one (close that one).
func (c *Conn) NetConn() net.Conn { return c.nc }

// plainTCP is the raw socket under nc when nothing on the way to it
// encrypts, or nil.
func plainTCP(nc net.Conn) syscall.RawConn {
	for range 8 {
		switch x := nc.(type) {
		case *tls.Conn:
			return nil
		case *net.TCPConn:
			if raw, err := x.SyscallConn(); err == nil {
				return raw
			}
			return nil
		case *fdConn:
			if raw, err := x.SyscallConn(); err == nil {
				return raw
			}
			return nil
		case interface{ NetConn() net.Conn }:
			nc = x.NetConn()
		default:
			return nil
		}
	}
	return nil
}

// fdConn is a TCP socket handed back to the poller after a loop owned it (detach_linux.go):
// an *os.File (pollable: reads wait, deadlines and Close behave as a
// net.Conn's) with the addresses of the connection it was.
type fdConn struct {
	*os.File
	local, remote net.Addr
}

func (c *fdConn) LocalAddr() net.Addr  { return c.local }
func (c *fdConn) RemoteAddr() net.Addr { return c.remote }

// Unwrap follows NetConn() to the innermost connection.
func Unwrap(nc net.Conn) net.Conn {
	for range 8 {
		u, ok := nc.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		nc = u.NetConn()
	}
	return nc
}

// Abort unblocks the connection's reads and writes at once and for good:
// the lazy read deadline never revives it. It may run on any goroutine.
func (c *Conn) Abort() {
	c.aborted.Store(true)
	_ = c.abortConn().SetDeadline(aLongTimeAgo)
	c.wakeLoop()
}

// abortConn is the net.Conn Abort sets a past deadline on. If a change of
// nc hides this one from Abort, the owner that changed it sees the abort
// flag and sets the new one's.
func (c *Conn) abortConn() net.Conn {
	c.ncMu.Lock()
	defer c.ncMu.Unlock()
	return c.nc
}

// Aborted reports whether Abort ran.
func (c *Conn) Aborted() bool { return c.aborted.Load() }

// SetReadDeadline bounds the next reads by t (zero: none), lazily: the
// socket keeps an armed deadline that passes first, and Read re-arms t
// when it does.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.SetReadDeadlineAt(MonoOf(t)) }

// SetReadDeadlineAt is SetReadDeadline with the deadline as a Mono: the
// caller adds an integer, and a time.Time is made only when the socket
// is armed.
func (c *Conn) SetReadDeadlineAt(m Mono) error {
	c.want = m
	if c.armed != NoDeadline && (m == NoDeadline || m >= c.armed) {
		return nil // the armed deadline fires first; Read re-arms m then
	}
	return c.arm(m)
}

// SetWriteDeadline bounds the next writes by t (zero: none): lazily on
// the raw socket, as Read's; through nc a deadline equal to the armed one
// costs nothing.
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.SetWriteDeadlineAt(MonoOf(t)) }

// SetWriteDeadlineAt is SetWriteDeadline with the deadline as a Mono.
func (c *Conn) SetWriteDeadlineAt(m Mono) error {
	c.wantWrite = m
	if rawIO && c.raw != nil && c.armedWrite != NoDeadline && (m == NoDeadline || m >= c.armedWrite) {
		return nil // the armed deadline fires first; Write re-arms m then
	}
	if m == c.armedWrite {
		return nil
	}
	return c.armWrite(m)
}

// armWrite sets the socket's write deadline; an abort that raced with it
// wins.
func (c *Conn) armWrite(m Mono) error {
	c.armedWrite = m
	err := c.nc.SetWriteDeadline(m.Time())
	if c.aborted.Load() {
		_ = c.nc.SetWriteDeadline(aLongTimeAgo) // an abort in between wins
	}
	return err
}

// arm sets the socket's read deadline. An abort that raced with it wins:
// its past deadline is put back.
func (c *Conn) arm(m Mono) error {
	c.armed = m
	err := c.nc.SetReadDeadline(m.Time())
	if c.aborted.Load() {
		_ = c.nc.SetReadDeadline(aLongTimeAgo)
	}
	return err
}

// Read reads from the connection, reading on past an armed deadline
// earlier than the one asked for.
func (c *Conn) Read(p []byte) (int, error) {
	for {
		n, err := c.read(p)
		if n > 0 || err == nil || !c.early(err) {
			return n, err
		}
		if err := c.arm(c.want); err != nil {
			return 0, err
		}
	}
}

// early reports whether err is the armed read deadline passing while the
// one asked for has not (and the connection was not aborted).
func (c *Conn) early(err error) bool { return c.earlyFor(err, c.want) }

// earlyFor reports whether err is an armed deadline passing before want.
func (c *Conn) earlyFor(err error, want Mono) bool {
	if !errors.Is(err, os.ErrDeadlineExceeded) || c.aborted.Load() {
		return false
	}
	return want == NoDeadline || Now() < want
}

func (c *Conn) read(p []byte) (int, error) {
	if !rawIO || c.raw == nil {
		return c.nc.Read(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if c.holding {
		return c.readInStep(p)
	}
	c.rd = rawOp{p: p}
	c.unanswered = false
	err := c.raw.Read(c.readFn)
	n, errno := c.rd.n, c.rd.errno
	c.rd = rawOp{}
	switch {
	case err != nil:
		return 0, err // a deadline or Close, as net.Conn reports them
	case errno != 0:
		return 0, c.opError("read", errno)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// readRaw is read's RawConn callback: false waits for readiness.
func (c *Conn) readRaw(fd uintptr) bool {
	for {
		n, errno := rawRead(fd, c.rd.p)
		switch errno {
		case 0:
			c.rd.n = n
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		c.rd.errno = errno
		return true
	}
}

// CanHold reports whether Hold runs its step (a plaintext TCP socket read
// with raw calls); when false, Hold returns at once and the caller reads
// as usual.
func (c *Conn) CanHold() bool { return rawIO && c.raw != nil }

// Hold runs step inside one syscall.RawConn.Read until step returns false
// (or the read side fails: a deadline, Abort, Close). Within step, Read
// reads in place and never waits: ErrWouldBlock when the socket is empty.
// A step that returns true waits for readiness and runs again; it may do
// so only when Drained (else bytes may be pending that no wake-up will
// report).
//
// Why: the runtime forgets a socket's readiness when a read call begins,
// so a connection read, then answered, then read again finds the socket
// empty once per exchange and waits after that (a read(2) that returns
// EAGAIN). Inside one call readiness is kept from the call's start: a
// step that read until the socket was empty, served what it read and
// then waits misses nothing that came in since, and needs no read to find
// out — nginx's shape. The cost is that the descriptor's read lock is
// held for the whole hold: no other Read of c (nor of the net.Conn under
// it) may run in it, and a Close of that net.Conn from another goroutine
// waits for step to return. An armed read deadline earlier than the one
// asked for is re-armed and the hold goes on with a fresh step.
//
// A Write in the step is write(2) on the held descriptor; only what the
// socket does not take at once goes through the write side (its lock and
// its deadline). So, as a Read in the step, it does not look at the
// deadline while the socket has room, and a Close from another goroutine
// does not stop it (the descriptor stays open until the step returns):
// Abort does. A caller that closes the connection under a running step
// aborts it first (h1's cut does).
func (c *Conn) Hold(step func() bool) error {
	if !c.CanHold() {
		return nil
	}
	c.holdStep = step
	defer func() { c.holdStep = nil }()
	for {
		err := c.raw.Read(c.holdFn)
		if err == nil || !c.early(err) {
			return err
		}
		if err := c.arm(c.want); err != nil {
			return err
		}
	}
}

// holdRaw is Hold's RawConn callback: one step; true ends the hold.
func (c *Conn) holdRaw(fd uintptr) bool { return c.stepIn(fd, c.holdStep) }

// stepIn runs step inside a readiness wait on fd (Hold's step, and
// ReadOnReply's): its reads read in place and never wait, and Drained
// tells what they left. It reports whether the wait ends (step returned
// false).
func (c *Conn) stepIn(fd uintptr, step func() bool) bool {
	c.holding, c.holdFD, c.drained = true, fd, drainNone
	c.unanswered = false
	wait := step()
	c.holding = false
	return !wait
}

// InStep reports whether Hold's step is running (on the caller's
// goroutine: only the owner asks).
func (c *Conn) InStep() bool { return c.holding }

// Drained reports whether, within the running step of Hold, the last read
// left the socket empty (a short read, or none to read), so that a wait
// started now cannot miss bytes. A short read counts only while a
// hang-up watcher (WatchHangUp) has the socket and saw no hang-up: the
// peer's FIN queued with the bytes read is reported by their readiness,
// and no later one would come. The socket joins the watcher's set here,
// the first time a short read is to be trusted (a hang-up already in is
// reported when it joins).
func (c *Conn) Drained() bool {
	if !c.holding || c.drained == drainNone {
		return false
	}
	if c.drained == drainEAGAIN {
		return true
	}
	return c.hup.joinHold(c.holdFD)
}

// WatchHangUp lets Hold learn from w of a peer's FIN that came with the
// last bytes read (its socket joins w's set at the first wait); without
// it, Hold's step reads on to EAGAIN after a short read. The owner calls
// StopWatchingHangUp before closing c.
func (c *Conn) WatchHangUp(w *HupWatcher) { c.hup.w, c.hup.wake = w, c.nc }

// readInStep is Read within Hold's step: read(2) once, never a wait.
func (c *Conn) readInStep(p []byte) (int, error) {
	for {
		n, errno := rawRead(c.holdFD, p)
		switch errno {
		case 0:
			c.drained = drainNone
			if n < len(p) {
				c.drained = drainShort
			}
			if n == 0 {
				return 0, io.EOF
			}
			return n, nil
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			c.drained = drainEAGAIN
			return 0, ErrWouldBlock
		}
		return 0, c.opError("read", errno)
	}
}

// Write writes p to the connection (and, with AwaitReply on, waits for
// the peer's reply to it).
func (c *Conn) Write(p []byte) (int, error) {
	n, err := c.write(p)
	c.written += uint64(n)
	return n, err
}

// WriteFrame writes head, p and tail, in that order, with one writev(2)
// when c is written straight from a held step (Hold's, and a loop's
// callback for a stream held there), and reports false, having written
// nothing, when it is not (the caller then writes through its buffer, as
// before). Why: a relayed SSE event is a chunk (its size line, the data,
// CRLF) sent as soon as it is framed; framed in the front end's buffered
// writer, each event borrowed the writer from its pool, copied the data in
// and flushed it out, where nginx hands the three pieces to one writev.
// What the socket does not take at once goes on as Write's remainder does:
// kept for the loop stream's goroutine (stashWrite), or written through
// the poller's wait. An error is Write's.
func (c *Conn) WriteFrame(head, p, tail []byte) (bool, error) {
	if !rawIO || c.raw == nil || !c.holding || c.aborted.Load() || c.awaitReply && !c.unanswered {
		return false, nil
	}
	if c.stash != nil && c.stashWrite(nil, false) {
		return false, nil // an earlier write was kept: Write keeps the order
	}
	c.unanswered = true
	n, errno := rawWritev(c.holdFD, head, p, tail)
	switch errno {
	case 0, syscall.EAGAIN:
	default:
		return true, c.opError("write", errno)
	}
	c.written += uint64(n)
	if n < len(head)+len(p)+len(tail) {
		return true, c.writeFrameRest(n, head, p, tail)
	}
	return true, nil
}

// writeFrameRest writes what WriteFrame's writev left of the frame (it
// took n bytes), in order, as Write writes it. A socket that takes part
// of a frame is rare: the caller's head and tail (its stack's) are
// copied then, so that they need not live on the heap for every frame.
// Apart from WriteFrame so that the frame of every event does not pay
// for this path's calls (~10 instructions, callgrind).
func (c *Conn) writeFrameRest(n int, head, p, tail []byte) error {
	if n < len(head) {
		if _, err := c.Write(bytes.Clone(head[n:])); err != nil {
			return err
		}
		n = 0
	} else {
		n -= len(head)
	}
	if n < len(p) {
		if _, err := c.Write(p[n:]); err != nil {
			return err
		}
		n = 0
	} else {
		n -= len(p)
	}
	if n < len(tail) {
		if _, err := c.Write(bytes.Clone(tail[n:])); err != nil {
			return err
		}
	}
	return nil
}

// Written is how many bytes Write has handed to the socket.
func (c *Conn) Written() uint64 { return c.written }

func (c *Conn) write(p []byte) (int, error) {
	if !rawIO || c.raw == nil {
		return c.nc.Write(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if c.awaitReply && !c.unanswered {
		return c.writeAwaitReply(p)
	}
	c.unanswered = true
	var done int
	if c.holding && !c.aborted.Load() {
		// Inside Hold's step the descriptor is held (its read lock, taken
		// by the RawConn.Read the step runs in): a Close elsewhere cannot
		// release its number for reuse until the step returns, so a write
		// straight to it needs no RawConn.Write of its own. Why: that call
		// takes the write lock and resets the poller's write state (a
		// timer check and a runtime call) before a write(2) that nearly
		// always takes every byte at once — per relayed SSE event, about a
		// tenth of the relay's user time. Only what the socket does not
		// take at once waits through RawConn.Write (and its deadline): a
		// write deadline bounds a write that waits, as on the raw path
		// below a write resumes where the armed deadline stopped it.
		if c.stash != nil && c.stashWrite(p, false) {
			return len(p), nil // an earlier write waits: keep the order
		}
		n, errno := writeAll(c.holdFD, p)
		switch errno {
		case 0:
			return n, nil
		case syscall.EAGAIN:
			if c.stashWrite(p[n:], true) {
				return n + len(p[n:]), nil
			}
			done, p = n, p[n:]
		default:
			return n, c.opError("write", errno)
		}
	}
	c.wr = rawOp{p: p}
	err := c.raw.Write(c.wrFn)
	for err != nil && c.earlyFor(err, c.wantWrite) {
		if err = c.armWrite(c.wantWrite); err == nil {
			err = c.raw.Write(c.wrFn) // on from where the armed deadline stopped it
		}
	}
	n, errno := done+c.wr.n, c.wr.errno
	c.wr = rawOp{}
	switch {
	case err != nil:
		return n, err
	case errno != 0:
		return n, c.opError("write", errno)
	}
	return n, nil
}

// writeRaw is Write's RawConn callback: it writes until p is out, false
// waits for room.
func (c *Conn) writeRaw(fd uintptr) bool {
	n, errno := writeAll(fd, c.wr.p[c.wr.n:])
	c.wr.n += n
	switch errno {
	case 0:
		return true
	case syscall.EAGAIN:
		return false
	}
	c.wr.errno = errno
	return true
}

// writeAll writes p to fd until it is out (0), the socket is full
// (EAGAIN) or a write fails; n is what the socket took.
func writeAll(fd uintptr, p []byte) (n int, errno syscall.Errno) {
	for n < len(p) {
		m, errno := rawWrite(fd, p[n:])
		switch errno {
		case 0:
			n += m
		case syscall.EINTR:
		default:
			return n, errno
		}
	}
	return n, 0
}

// AwaitReply turns on (or off) waiting for a reply after each Write: once
// p is out, Write returns only when a read would not block (bytes, an end
// of stream, or an error, an expired deadline or an abort for the read to
// report). It does nothing when c has no plaintext TCP socket under it.
//
// Why: a request written and then read at once finds the socket empty
// nearly every time (the peer has not run yet), so that read is a wasted
// read(2) and a wait follows anyway. Writing from inside the read-side
// poll wait (syscall.RawConn.Read arms readiness before it calls back)
// leaves out the empty read without missing a reply that comes back
// before the wait begins. The caller turns it on only for the last write
// of a request on a connection whose peer has nothing to send before it
// (a pooled engine connection that Quiet, or a hang-up watcher moments
// after its last exchange, found silent): bytes that came in before the
// write would not wake the wait, which then lasts until the read
// deadline or an abort. For the same reason Write does not wait
// after an earlier Write since the last read or Quiet (a request head
// flushed before its body's end): the peer may have answered it already.
func (c *Conn) AwaitReply(on bool) { c.awaitReply = on }

// ReleaseOnReplyWait sets f (nil: none) to run when a Write with
// AwaitReply on has put all its bytes out and is about to wait: p is
// not read again, so f may give its memory back. Why: the wait lasts the
// peer's time to its first byte (an engine's, seconds for a long prompt),
// and a request buffer held through it is held by every stream waiting
// for its engine at once. f runs on the writing goroutine, inside Write.
func (c *Conn) ReleaseOnReplyWait(f func()) { c.replyOut = f }

// ReadOnReply sets f (nil: none) to run when a Write with AwaitReply on
// has waited and the socket is readable, before that Write returns: f
// runs inside the wait as Hold's step does (Read reads in place and
// never waits: ErrWouldBlock when the wake-up found the socket empty).
// f returns true to wait on, which it may do only after ErrWouldBlock,
// and false to end the wait. Why: without it the caller's first read of
// the reply is a RawConn.Read of its own (the descriptor's read lock
// taken and released again, the poller's state reset) right after the
// wait's; from inside the wait it is read(2) alone.
func (c *Conn) ReadOnReply(f func() bool) { c.replyIn = f }

// writeAwaitReply is Write with AwaitReply on: p written from a read-side
// callback, then the wait. What the callback could not write (a full
// send buffer, or no call at all because the read side had failed
// already) is written as Write does, without the wait.
func (c *Conn) writeAwaitReply(p []byte) (int, error) {
	c.unanswered = true
	c.wr = rawOp{p: p}
	c.replyWrote = false
	_ = c.raw.Read(c.replyFn) // the wait's end is the next read's to report
	n, errno := c.wr.n, c.wr.errno
	c.wr = rawOp{}
	if errno != 0 {
		return n, c.opError("write", errno)
	}
	if n < len(p) {
		c.awaitReply = false
		m, err := c.write(p[n:])
		c.awaitReply = true
		return n + m, err
	}
	return n, nil
}

// replyRaw is writeAwaitReply's RawConn callback: its first call writes
// (false, the wait, once all is out); a call after a readiness wake-up
// ends the wait, after ReadOnReply's f has read in place (which may wait
// on).
func (c *Conn) replyRaw(fd uintptr) bool {
	if c.replyWrote {
		if c.replyIn == nil {
			return true
		}
		return c.stepIn(fd, c.replyIn)
	}
	c.replyWrote = true
	c.writeRaw(fd)
	// All out: wait. A failed or partial write returns to writeAwaitReply.
	if c.wr.errno != 0 || c.wr.n < len(c.wr.p) {
		return true
	}
	c.wr.p = nil
	if c.replyOut != nil {
		c.replyOut()
	}
	return false
}

// Quiet reports whether nothing is pending on an idle connection: no bytes
// and no end of stream (a pooled engine connection the engine has not
// closed). It never blocks; it is true when c cannot tell (no plaintext
// TCP socket under nc).
func (c *Conn) Quiet() bool {
	if c.raw == nil {
		return true
	}
	c.unanswered = false
	for {
		c.rd = rawOp{}
		err := c.raw.Read(c.peekFn)
		quiet := c.rd.errno == syscall.EAGAIN
		c.rd = rawOp{}
		if err == nil {
			return quiet
		}
		// A read deadline left armed by the last exchange has passed
		// while the connection sat idle: that says nothing about it.
		if !c.early(err) || c.arm(c.want) != nil {
			return false
		}
	}
}

// WaitReadable returns once a read would not block (bytes, an end of
// stream or an error to report), holding no read buffer while it waits:
// a caller can borrow one only when there is something to read. It returns
// at once when c cannot tell (no plaintext TCP socket under nc); the
// read deadline and Abort end the wait as they end a read, and an armed
// deadline earlier than the one asked for is re-armed and the wait goes
// on.
func (c *Conn) WaitReadable() {
	if c.raw == nil {
		return
	}
	for {
		c.waitPeeked = false
		err := c.raw.Read(c.waitFn)
		if err == nil || !c.early(err) || c.arm(c.want) != nil {
			return
		}
	}
}

// waitRaw is WaitReadable's RawConn callback. Its first call looks (one
// non-blocking peek, the syscall the read would have made to find the
// socket empty); a call after a readiness wake-up trusts it: the read that
// follows finds out, and an empty wake-up costs that read an ordinary wait.
func (c *Conn) waitRaw(fd uintptr) bool {
	if c.waitPeeked {
		return true
	}
	c.waitPeeked = true
	return rawPeek(fd, c.peekBuf[:]) != syscall.EAGAIN
}

// peekRaw is Quiet's RawConn callback: one non-blocking peek, never a
// wait.
func (c *Conn) peekRaw(fd uintptr) bool {
	c.rd.errno = rawPeek(fd, c.peekBuf[:])
	return true
}

// opError wraps a failed read(2) or write(2) as net.Conn's methods do.
func (c *Conn) opError(op string, errno syscall.Errno) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.nc.LocalAddr(), Addr: c.nc.RemoteAddr(),
		Err: os.NewSyscallError(op, errno)}
}
