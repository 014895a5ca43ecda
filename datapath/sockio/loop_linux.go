//go:build linux

package sockio

import (
	"cmp"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// Why a loop: a ReadEach run by its own goroutine is woken by the
// netpoller and parked again for every relayed event, and with many
// streams each wake-up resumes a stack and a goroutine no other stream
// touched since: about a third of an SSE relay's user time per event was
// that wake and park. A Loops set instead waits on an epoll set of its
// own (through the netpoller, as HupWatcher does) and runs each ready
// stream's callback on its goroutine, one after the other, nginx's shape.
// The stream's goroutine waits inside the socket's RawConn.Read (so the
// descriptor's number stays its own) until the stream ends, its deadline
// passes, Abort runs, or its handler's client write would block; in the
// last three cases the stream leaves the loop and goes on in ReadEach's
// own waits, as before.

// Loops runs ReadEach callbacks from epoll loops, one per procsPerLoop
// Ps (one per P). A loop starts with the first stream it is given and
// ends after a tick (hupTick) with none, as HupWatcher's goroutine does.
// The zero value is ready.
type Loops struct {
	mu   sync.Mutex
	set  []*loop
	size int // loops; 0: loopsFor GOMAXPROCS
	buf  int // a loop's read buffer (tests); 0: loopBuf
}

// procsPerLoop is how many Ps share a loop by default: one. Fewer loops
// take bigger batches per wake-up (each wake-up is a park and a ready
// through the scheduler, ~4,000 instructions under callgrind, against
// ~1,000 for an event's callbacks), and a loop per two Ps cut user-space
// instructions an event by 12 % on 2 Ps (irsse.sh 3,864 → 3,411), but it
// cost more CPU an event in all, system time included: 1.05× a loop per
// P over eight alternated rounds of fresh daemons (ssebench/abba.sh, 1,000
// streams × 100 events; higher in all eight, the system time's doing), and
// 1.01–1.10× in three runs of four (docs/performance.md, session 22). All
// CPU is what a replica is sized by.
const procsPerLoop = 1

// loopsFor is the number of loops for procs Ps when Loops.size is 0.
func loopsFor(procs int) int { return max(1, procs/procsPerLoop) }

// loop is one epoll set and the goroutine that waits on it.
type loop struct {
	ep     *Epoll
	mu     sync.Mutex
	ops    opTable
	closed bool // run has returned: register starts another
	buf    int  // the size of its read buffer
}

// opTable is a loop's streams by id: a slot's index in its low 32 bits,
// the slot's use count (from 1) in the high ones, so an event for a
// stream that left, delivered after its slot went to another, finds no
// stream. Why not a map: the batch's lookups were a map access each, ~80
// instructions per relayed event (docs/performance.md, session 18); a
// slot is an index and a comparison.
type opTable struct {
	slots []opSlot
	free  []uint32 // slots not in use
	live  int
}

type opSlot struct {
	op  *eachOp // nil: free
	gen uint32
}

// add enters op under a new id (never 0).
func (t *opTable) add(op *eachOp) uint64 {
	var i uint32
	if n := len(t.free); n > 0 {
		i, t.free = t.free[n-1], t.free[:n-1]
	} else {
		i = uint32(len(t.slots))
		t.slots = append(t.slots, opSlot{})
	}
	sl := &t.slots[i]
	sl.gen++
	if sl.gen == 0 {
		sl.gen = 1 // id 0 means out of the set
	}
	sl.op = op
	t.live++
	return uint64(i) | uint64(sl.gen)<<32
}

// get is the stream entered under id, nil if it left.
func (t *opTable) get(id uint64) *eachOp {
	if i := uint32(id); int(i) < len(t.slots) && t.slots[i].gen == uint32(id>>32) {
		return t.slots[i].op
	}
	return nil
}

// remove takes the stream under id out; an id no longer in use is
// ignored.
func (t *opTable) remove(id uint64) {
	i := uint32(id)
	if int(i) >= len(t.slots) || t.slots[i].gen != uint32(id>>32) || t.slots[i].op == nil {
		return
	}
	t.slots[i].op = nil
	t.free = append(t.free, i)
	t.live--
}

// register enters op under a new id in the loop for fd, starting one
// when none runs; nil when no epoll set can be made.
func (ls *Loops) register(fd uintptr, op *eachOp) (*loop, uint64) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	n := ls.size
	if n <= 0 {
		n = loopsFor(runtime.GOMAXPROCS(0))
	}
	if len(ls.set) != n {
		ls.set = make([]*loop, n) // the running ones end on their own
	}
	i := int(fd) % n
	l := ls.set[i]
	if l != nil {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			l = nil
		}
	}
	if l == nil {
		ep, err := NewEpoll()
		if err != nil {
			return nil, 0
		}
		l = &loop{ep: ep, buf: cmp.Or(ls.buf, loopBuf)}
		ls.set[i] = l
		l.mu.Lock()
		go l.run()
	}
	id := l.ops.add(op)
	l.mu.Unlock()
	return l, id
}

// run waits for the set's sockets and runs each ready stream's callback.
// A stream's own goroutine takes it out under op.loopMu, so a callback
// never runs for a stream that left (its id no longer matches).
func (l *loop) run() {
	var events [128]syscall.EpollEvent
	var ops [len(events)]*eachOp
	// The loop's read buffer, lent to each callback in turn (loopRun):
	// the callbacks run one after the other, and what a callback keeps of
	// its bytes past its end it copies (stashWrite), so no stream holds a
	// buffer between events and none is borrowed from a pool per event.
	buf := make([]byte, l.buf)
	handle := func(evs []syscall.EpollEvent) {
		// The batch's streams looked up together, under one lock: the
		// lookups' cache misses overlap instead of one per callback.
		l.mu.Lock()
		for i := range evs {
			ops[i] = l.ops.get(eventID(&evs[i]))
		}
		l.mu.Unlock()
		// One clock reading for the batch, as nginx's loop updates its
		// time once per epoll_wait: each handler may take it for its
		// read (EachState.ReadAt) instead of reading the clock itself.
		now := Now()
		for i := range evs {
			if op := ops[i]; op != nil {
				ops[i] = nil
				op.loopRun(l, eventID(&evs[i]), evs[i].Events, buf, now)
			}
		}
	}
	for {
		err := l.ep.WaitEach(events[:], hupTick, handle)
		l.mu.Lock()
		if l.ops.live == 0 || err != nil {
			// Idle for a tick (or the set failed: its streams' own
			// deadlines and Abort still end their waits).
			l.closed = true
			l.mu.Unlock()
			_ = l.ep.Close()
			return
		}
		l.mu.Unlock()
	}
}

// eventID is the stream id register gave an event's socket.
func eventID(ev *syscall.EpollEvent) uint64 {
	return uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
}

// loopBuf is the size of a loop's read buffer: the relay's pooled
// buffers' (datapath's runtime), so a read takes what it took before.
const loopBuf = 32 << 10

// loopRun runs op's callback for one readiness, its reads into buf (the
// loop's, lent for the call) and at now (the batch's clock reading); when
// the stream ends, or its client write was stashed, it leaves the set and
// its goroutine is woken.
//
// loopMu is unlocked by hand, not deferred (a defer was ~20 instructions
// per relayed event): a panic in the callback ends the process, as any
// on a goroutine with no recover, so no unwinding needs the lock freed.
func (op *eachOp) loopRun(l *loop, id uint64, events uint32, buf []byte, now Mono) {
	op.loopMu.Lock()
	if op.loopID != id {
		op.loopMu.Unlock()
		return
	}
	if events&(syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0 {
		op.drain = true // read on to EOF or the error
	}
	op.lent, op.readAt = buf, now
	ended := op.run(op.loopFD)
	op.lent, op.readAt = nil, NoDeadline
	if ended {
		op.ended = true
	} else if !op.stalled {
		op.loopMu.Unlock()
		return
	}
	op.leave(l)
	op.wake()
	op.loopMu.Unlock()
}

// leave takes op out of l's set; under op.loopMu.
func (op *eachOp) leave(l *loop) {
	if op.loopID == 0 {
		return
	}
	l.mu.Lock()
	l.ops.remove(op.loopID)
	l.mu.Unlock()
	op.loopID = 0
	_ = l.ep.Ctl(syscall.EPOLL_CTL_DEL, int(op.loopFD), nil)
}

// wake ends the wait of op's goroutine (once per loop run: the channel
// holds one).
func (op *eachOp) wake() {
	select {
	case op.woken <- struct{}{}:
	default:
	}
}

// readEachInLoop runs op's reads from a loop of ls until the stream ends
// (true: op holds the outcome) or it must go on in ReadEach's own waits
// (false: a deadline, Abort, a stashed client write, or no loop). With
// detach, the socket is out of the runtime's poller meanwhile when it can
// be (detach_linux.go); err is then the failure to hand it back.
func (c *Conn) readEachInLoop(ls *Loops, op *eachOp, detach bool) (ended bool, err error) {
	if op.woken == nil {
		op.woken = make(chan struct{}, 1)
	}
	if detach {
		// The descriptor is the stream's own until reattach: nothing
		// else can close it while the loop may still read it.
		if fd, ok := c.detach(); ok {
			ended = c.waitInLoop(ls, op, fd)
			return ended, c.reattach(fd)
		}
	}
	// Inside a RawConn.Read the descriptor is held: a Close elsewhere
	// cannot free its number while the loop may still read it.
	_ = c.raw.Read(func(fd uintptr) bool {
		ended = c.waitInLoop(ls, op, fd)
		return true
	})
	return ended, nil
}

// waitInLoop registers op in l and waits; see readEachInLoop.
func (c *Conn) waitInLoop(ls *Loops, op *eachOp, fd uintptr) bool {
	op.loopMu.Lock() // before the loop can see op
	l, id := ls.register(fd, op)
	if l == nil {
		op.loopMu.Unlock()
		return false
	}
	op.loopFD, op.loopID, op.ended, op.stalled = fd, id, false, false
	c.loopOp.Store(op)
	if client := op.client; client != nil {
		client.stash = op
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | epollET, Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
	if err := l.ep.Ctl(syscall.EPOLL_CTL_ADD, int(fd), &ev); err != nil {
		op.loopID = 0
	}
	registered := op.loopID != 0
	op.loopMu.Unlock()
	if !registered {
		l.mu.Lock()
		l.ops.remove(id)
		l.mu.Unlock()
		c.leftLoop(op)
		return false
	}
	if c.aborted.Load() { // an Abort before loopOp was set woke no one
		op.wake()
	}
	var timer *time.Timer
	var tc <-chan time.Time
	for {
		op.loopMu.Lock()
		want := c.want
		op.loopMu.Unlock()
		if want != NoDeadline {
			d := want.Sub(Now())
			if d <= 0 {
				break
			}
			if timer == nil {
				timer = time.NewTimer(d)
				tc = timer.C
			} else {
				timer.Reset(d)
			}
		}
		select {
		case <-op.woken:
		case <-tc:
			continue // the deadline asked for may have moved on
		}
		break
	}
	if timer != nil {
		timer.Stop()
	}
	op.loopMu.Lock()
	op.leave(l)
	ended := op.ended
	op.loopMu.Unlock()
	c.leftLoop(op)
	return ended
}

// leftLoop undoes waitInLoop's marks once op is out of the set.
func (c *Conn) leftLoop(op *eachOp) {
	c.loopOp.Store(nil)
	if client := op.client; client != nil {
		client.stash = nil
	}
	select { // a wake-up from before the stream left
	case <-op.woken:
	default:
	}
}

// wakeLoop ends the loop wait of a ReadEach on c, if one runs (Abort).
func (c *Conn) wakeLoop() {
	if op := c.loopOp.Load(); op != nil {
		op.wake()
	}
}

// stashWrite keeps p for the loop stream's goroutine to write (true) when
// c is written from a loop's callback and a write would block (blocked),
// or one did already (so the bytes stay in order): the loop must not wait
// on one client. The stream leaves the loop after the
// callback, and its goroutine writes the stash, waiting as Write waits.
func (c *Conn) stashWrite(p []byte, blocked bool) bool {
	op := c.stash
	if op == nil || !blocked && !op.stalled {
		return false
	}
	op.tail = append(op.tail, p...)
	op.stalled = true
	return true
}

// flushStash writes what stashWrite kept, as Write would have.
func (op *eachOp) flushStash() error {
	if len(op.tail) == 0 || op.client == nil {
		return nil
	}
	_, err := op.client.write(op.tail) // Write counted it

	op.tail = op.tail[:0]
	if err != nil {
		return &ClientWriteError{Err: err}
	}
	return nil
}

// started reports whether a loop of the set has run (tests).
func (ls *Loops) started() bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for _, l := range ls.set {
		if l != nil {
			return true
		}
	}
	return false
}
