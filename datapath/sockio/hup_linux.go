//go:build linux

package sockio

import (
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Why a hang-up watcher: ReadEach waits after a short read without reading
// again, trusting the next readiness. A peer's FIN (or RST) that lands
// together with its last bytes is reported by the same readiness as those
// bytes, so no later one comes, and the stream would sit until its read
// deadline. nginx learns of it from the event itself (EPOLLRDHUP); Go's
// poller does not pass that on. So the sockets of running ReadEach loops
// are also in an epoll set of this watcher's, for the hang-up alone
// (EPOLLRDHUP, edge-triggered: bytes do not wake it); it wakes the loop
// the way Abort does, and the loop reads to the end.

// epollET is EPOLLET as a uint32 (package syscall's constant is negative
// on some architectures and positive on others).
const epollET = 1 << 31

// hupTick bounds the watcher's wait, so its goroutine notices that no
// loop is left and exits.
const hupTick = 250 * time.Millisecond

// HupWatcher wakes ReadEach loops whose peer hung up. The zero value is
// ready; its goroutine runs only while loops are registered.
type HupWatcher struct {
	mu      sync.Mutex
	ep      *Epoll // valid while running
	running bool
	next    uint64
	ops     map[uint64]hangUpper
}

// hangUpper is what the watcher wakes: a ReadEach loop (eachOp) or a
// connection in Hold (Conn).
type hangUpper interface{ hangUp() }

// watch registers op's socket fd under the id it returns; false when it
// could not (op then reads on to EAGAIN after each read, as if woken by a
// hang-up).
func (w *HupWatcher) watch(op hangUpper, fd uintptr) (uint64, bool) {
	w.mu.Lock()
	if !w.running {
		ep, err := NewEpoll()
		if err != nil {
			w.mu.Unlock()
			return 0, false
		}
		w.ep, w.running = ep, true
		if w.ops == nil {
			w.ops = map[uint64]hangUpper{}
		}
		go w.run(ep)
	}
	w.next++
	id := w.next
	w.ops[id] = op
	ep := w.ep
	w.mu.Unlock()
	ev := syscall.EpollEvent{Events: syscall.EPOLLRDHUP | epollET, Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
	err := ep.Ctl(syscall.EPOLL_CTL_ADD, int(fd), &ev)
	if err == syscall.EEXIST { // an earlier stream on this connection
		err = ep.Ctl(syscall.EPOLL_CTL_MOD, int(fd), &ev)
	}
	if err != nil {
		w.unwatch(id)
		return 0, false
	}
	return id, true
}

// unwatch forgets what watch registered under id. Its socket stays in the
// set (a hang-up later finds no one); closing the socket takes it out.
func (w *HupWatcher) unwatch(id uint64) {
	w.mu.Lock()
	delete(w.ops, id)
	w.mu.Unlock()
}

// run waits on ep through the netpoller (Epoll), not in a blocking
// epoll_wait: a thread blocked there kept the runtime's monitor waking.
func (w *HupWatcher) run(ep *Epoll) {
	var events [32]syscall.EpollEvent
	for {
		n, err := ep.Wait(events[:], hupTick) // n is 0 with an error
		w.mu.Lock()
		for _, ev := range events[:n] {
			if op := w.ops[uint64(uint32(ev.Fd))|uint64(uint32(ev.Pad))<<32]; op != nil {
				op.hangUp()
			}
		}
		if len(w.ops) == 0 || err != nil {
			w.running = false
			w.mu.Unlock()
			_ = ep.Close()
			return
		}
		w.mu.Unlock()
	}
}

// hangUp marks op's peer as gone and ends its wait (a past read deadline,
// as Abort's; the loop re-arms the one asked for).
func (op *eachOp) hangUp() {
	op.hup.Store(true)
	_ = op.c.nc.SetReadDeadline(aLongTimeAgo)
}

// hupWatch is a Conn's place in a HupWatcher's set: Hold's (WatchHangUp)
// or a pooled connection's (WatchPeer). Only the Conn's owner changes
// it; the watcher's goroutine sets gone.
type hupWatch struct {
	w     *HupWatcher
	id    uint64
	state uint8 // hupNone, hupWatched, hupFailed
	gone  atomic.Bool
	// wake, when set (Hold's), has its read wait ended by a hang-up too.
	wake net.Conn
}

// hangUp marks the peer as gone and, for Hold, ends its wait (a past read
// deadline, as Abort's; Hold re-arms the one asked for, and its step
// reads to the end).
func (h *hupWatch) hangUp() {
	h.gone.Store(true)
	if h.wake != nil {
		_ = h.wake.SetReadDeadline(aLongTimeAgo)
	}
}

// join registers fd with the watcher, once; EPOLL_CTL_ADD reports a
// hang-up that came before it.
func (h *hupWatch) join(fd uintptr) {
	if h.w == nil || h.state != hupNone {
		return
	}
	h.state = hupFailed
	if id, ok := h.w.watch(h, fd); ok {
		h.id, h.state = id, hupWatched
	}
}

// joinHold joins from Hold's step (Drained) and reports whether a short
// read can be trusted: the watcher has the socket and saw no hang-up.
func (h *hupWatch) joinHold(fd uintptr) bool {
	h.join(fd)
	return h.state == hupWatched && !h.gone.Load()
}

// stop takes the socket off the watcher for good.
func (h *hupWatch) stop() {
	if h.state == hupWatched {
		h.w.unwatch(h.id)
	}
	h.state = hupFailed
}

// StopWatchingHangUp takes c off the hang-up watcher WatchHangUp gave it
// (the connection's owner, before it closes c).
func (c *Conn) StopWatchingHangUp() { c.hup.stop() }

// WatchPeer puts c's socket in w's set until StopWatchingPeer (or its
// close): PeerGone then reports a FIN or reset from the peer that came at
// any time since, with no system call. One epoll_ctl, once per
// connection: a later call reports the first's answer. False when c has
// no plaintext TCP socket or w could not take it.
//
// Why: a pooled engine connection used to be peeked at before each reuse
// (Quiet, one recv(2) per request) to catch an engine that closed it
// while idle. nginx learns that from the event loop it already runs; Go's
// poller does not pass it on, so a watcher of ours does, woken only by
// hang-ups (bytes do not wake it: EPOLLRDHUP, edge-triggered).
func (c *Conn) WatchPeer(w *HupWatcher) bool {
	if c.raw != nil && c.hup.state == hupNone {
		c.hup.w = w
		_ = c.raw.Control(c.hup.join)
	}
	return c.hup.state == hupWatched
}

// PeerGone reports whether the watcher WatchPeer gave c saw the peer hang
// up. False when c is not watched: the caller then cannot tell.
func (c *Conn) PeerGone() bool { return c.hup.state == hupWatched && c.hup.gone.Load() }

// StopWatchingPeer takes c off the watcher WatchPeer gave it (its owner,
// when it closes c: the watcher's goroutine ends once nothing is watched).
func (c *Conn) StopWatchingPeer() { c.hup.stop() }

// PeerAcked reports how many bytes written to c the peer's TCP has
// acknowledged (tcp_info's bytes_acked, Linux 4.2 on); false when c has no
// TCP socket to ask. Compared with Written, it tells a request that
// never reached the engine's socket: an engine that closed first answers
// the bytes with a reset, never an acknowledgement, while one that read
// them acknowledges them (with its answer, its FIN, or on its own).
// A system call: for a failed exchange, not each one.
func (c *Conn) PeerAcked() (uint64, bool) {
	if c.raw == nil {
		return 0, false
	}
	var acked uint64
	var err error
	cerr := c.raw.Control(func(fd uintptr) {
		var ti *unix.TCPInfo
		if ti, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			acked = ti.Bytes_acked
		}
	})
	return acked, cerr == nil && err == nil
}
