//go:build linux

package sockio

import (
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// sockFD is nc's descriptor number.
func sockFD(t *testing.T, nc net.Conn) int {
	t.Helper()
	rc, err := nc.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	fd := -1
	_ = rc.Control(func(u uintptr) { fd = int(u) })
	return fd
}

// TestHupWatcherFDReused: a stream's socket stays in the watcher's set
// after the stream (unwatch does not remove it), and is closed; a new
// connection that gets the same descriptor number while the watcher runs
// (another stream keeps it alive) must be watched afresh: its FIN queued
// with its last bytes ends its stream at once, not at its read deadline.
// Then, with no stream left, the watcher's goroutine stops.
func TestHupWatcherFDReused(t *testing.T) {
	w := new(HupWatcher)
	// A stream that keeps the watcher running throughout.
	keep, keepPeer := pair(t)
	_ = keep.SetReadDeadline(time.Now().Add(30 * time.Second))
	kept := make(chan error, 1)
	go func() { kept <- keep.ReadEach(&gather{t: t, buf: make([]byte, 64)}, w, nil) }()

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dial := func() (*Conn, net.Conn) {
		nc, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		peer, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = nc.Close(); _ = peer.Close() })
		return New(nc), peer
	}
	reused := false
	for range 20 {
		a, aPeer := dial()
		fd := sockFD(t, a.NetConn())
		_, _ = io.WriteString(aPeer, "x")
		_ = a.SetReadDeadline(time.Now().Add(10 * time.Second))
		// One read, then the handler stops: a's socket stays in the set.
		if err := a.ReadEach(&gather{t: t, buf: make([]byte, 64), stopAfter: 1}, w, nil); err != nil {
			t.Fatal(err)
		}
		_ = a.NetConn().Close()
		_ = aPeer.Close()
		b, bPeer := dial()
		if sockFD(t, b.NetConn()) != fd {
			continue // the number went elsewhere: try again
		}
		reused = true
		// The reused number registers (else ReadEach would fall back to
		// reading to EAGAIN, and pass below without the watcher).
		probe := &eachOp{eachRun: eachRun{c: b}}
		id, ok := w.watch(probe, uintptr(fd))
		if !ok {
			t.Fatal("the watcher refused the reused descriptor")
		}
		w.unwatch(id)
		_, _ = io.WriteString(bPeer, "hello")
		_ = bPeer.Close() // FIN queued behind the bytes
		g := &gather{t: t, buf: make([]byte, 64)}
		// The bytes alone may wake the first wait; let the FIN land too.
		time.Sleep(20 * time.Millisecond)
		_ = b.SetReadDeadline(time.Now().Add(10 * time.Second))
		start := time.Now()
		err := b.ReadEach(g, w, nil)
		if string(g.got) != "hello" || err != io.EOF {
			t.Fatalf("on the reused descriptor: read %q, %v after %v", g.got, err, time.Since(start))
		}
		break
	}
	if !reused {
		t.Fatal("no descriptor number was reused in 20 tries")
	}
	_ = keepPeer.Close()
	if err := <-kept; err != io.EOF {
		t.Fatalf("the keeping stream ended with %v", err)
	}
	waitWatcherStopped(t, w)
}

// waitWatcherStopped waits up to 5 s (the watcher's tick is 250 ms) for
// w's goroutine to end, with nothing left in its set.
func waitWatcherStopped(t *testing.T, w *HupWatcher) {
	t.Helper()
	waitFor(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return !w.running
	}, 5*time.Second)
}

// TestWatchPeer: a watched connection's peer hanging up (a FIN, a reset,
// or a FIN that came before the socket joined) is reported by PeerGone;
// bytes alone are not. Once every connection stops being watched, the
// watcher's goroutine ends.
func TestWatchPeer(t *testing.T) {
	w := new(HupWatcher)
	for _, tc := range []struct {
		name     string
		before   func(peer net.Conn) // before the socket joins
		after    func(peer net.Conn)
		wantGone bool
	}{
		{"bytes", nil, func(p net.Conn) { _, _ = io.WriteString(p, "x") }, false},
		{"FIN", nil, func(p net.Conn) { _ = p.Close() }, true},
		{"reset", nil, func(p net.Conn) { _ = p.(*net.TCPConn).SetLinger(0); _ = p.Close() }, true},
		{"FIN before joining", func(p net.Conn) { _ = p.Close() }, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, peer := pair(t)
			defer c.StopWatchingPeer()
			if tc.before != nil {
				tc.before(peer)
				time.Sleep(20 * time.Millisecond) // the FIN lands
			}
			if !c.WatchPeer(w) {
				t.Fatal("WatchPeer refused a plaintext TCP socket")
			}
			if tc.after != nil {
				tc.after(peer)
			}
			if !tc.wantGone {
				// Bytes, then a FIN from a second connection kept in the
				// same set: once that one is reported, this one's bytes
				// had their chance to be (wrongly) too.
				d, dPeer := pair(t)
				defer d.StopWatchingPeer()
				if !d.WatchPeer(w) {
					t.Fatal("WatchPeer refused the second socket")
				}
				time.Sleep(20 * time.Millisecond)
				_ = dPeer.Close()
				waitFor(t, d.PeerGone, 10*time.Second)
				if c.PeerGone() {
					t.Fatal("PeerGone after bytes alone")
				}
				return
			}
			waitFor(t, c.PeerGone, 10*time.Second)
		})
	}
	waitWatcherStopped(t, w)
}

// waitFor polls cond for up to bound.
func waitFor(t *testing.T, cond func() bool, bound time.Duration) {
	t.Helper()
	for end := time.Now().Add(bound); !cond(); {
		if time.Now().After(end) {
			t.Fatal("timed out")
		}
		time.Sleep(2 * time.Millisecond)
	}
}
