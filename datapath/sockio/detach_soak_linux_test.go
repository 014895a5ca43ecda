//go:build linux

package sockio

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"testing"
	"time"
)

// TestWatchPeerAcrossDetach: a pooled connection watched for its peer's
// hang-up (WatchPeer) and then relayed from a loop with Detach, once or
// twice, still reports the peer's FIN afterwards (the watcher's entry was
// made under a descriptor the detach closed; the socket it names is the
// same), as the pool's reuse check relies on.
func TestWatchPeerAcrossDetach(t *testing.T) {
	if !rawIO {
		t.Skip("no loops without raw calls (-race, non-Linux)")
	}
	errStop := errors.New("stop")
	w := new(HupWatcher)
	for _, tc := range []struct {
		watchAfter int // detached streams before WatchPeer
		streams    int // detached streams in all
	}{
		{0, 1}, {0, 2}, {1, 2}, {1, 3},
	} {
		t.Run(fmt.Sprintf("watch after %d of %d", tc.watchAfter, tc.streams), func(t *testing.T) {
			c, peer := pair(t)
			t.Cleanup(func() { c.StopWatchingPeer(); _ = c.NetConn().Close() })
			ls := new(Loops)
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			for i := range tc.streams {
				if i == tc.watchAfter && !c.WatchPeer(w) {
					t.Fatal("WatchPeer refused a plaintext TCP socket")
				}
				g := &gather{t: t, buf: make([]byte, 64), stopAfter: 1, stopErr: errStop}
				if _, err := io.WriteString(peer, "a"); err != nil {
					t.Fatal(err)
				}
				if err := c.ReadEach(g, nil, &EachState{Loops: ls, Detach: true}); !errors.Is(err, errStop) {
					t.Fatalf("stream %d: %v, want the handler's stop", i, err)
				}
			}
			if _, ok := c.NetConn().(*fdConn); !ok {
				t.Fatalf("net.Conn after the streams: %T, want *fdConn", c.NetConn())
			}
			if c.PeerGone() {
				t.Fatal("PeerGone before the peer hung up")
			}
			_ = peer.Close()
			waitFor(t, c.PeerGone, 10*time.Second)
		})
	}
}

// TestDetachAbortAnywhere aborts relayed streams at arbitrary points of
// their detach, loop wait and hand-back (from another goroutine, after a
// random number of scheduler yields) while their peers keep writing, and
// checks that each ReadEach returns, that closing the connection it
// handed back closes the peer's socket (no descriptor of the socket left
// open anywhere), and that the process's descriptors come back to their
// count before the streams.
func TestDetachAbortAnywhere(t *testing.T) {
	if !rawIO {
		t.Skip("no loops without raw calls (-race, non-Linux)")
	}
	const streams = 200
	ls := new(Loops)
	before := openFDs(t)
	for i := range streams {
		func() {
			c, peer := pair(t)
			defer peer.Close()
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			stopWriting := make(chan struct{})
			wrote := make(chan struct{})
			go func() { // the engine: events until the stream is gone
				defer close(wrote)
				for {
					select {
					case <-stopWriting:
						return
					default:
					}
					if _, err := io.WriteString(peer, "data: x\n\n"); err != nil {
						return
					}
					time.Sleep(100 * time.Microsecond)
				}
			}()
			g := &gather{t: t, buf: make([]byte, 64)}
			done := make(chan error, 1)
			go func() { done <- c.ReadEach(g, nil, &EachState{Loops: ls, Detach: true}) }()
			for range rand.IntN(64) {
				runtime.Gosched()
			}
			c.Abort()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatalf("stream %d: ReadEach did not return after Abort", i)
			}
			close(stopWriting)
			<-wrote
			if err := c.NetConn().Close(); err != nil {
				t.Fatalf("stream %d: closing the connection handed back: %v", i, err)
			}
			_ = peer.SetReadDeadline(time.Now().Add(10 * time.Second))
			// A FIN, or a reset (bytes were left unread): the socket is
			// closed. A wait to the deadline: a descriptor holds it open.
			if _, err := io.Copy(io.Discard, peer); errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("stream %d: the peer's socket stayed open after the close: %v", i, err)
			}
		}()
	}
	// The loops' epoll sets end a tick after their last stream.
	waitFor(t, func() bool { return openFDs(t) <= before }, 10*time.Second)
}

// openFDs counts the process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
