//go:build linux

package sockio

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// gather is a ReadHandler that keeps what it reads, checks the lending
// contract, and stops after stopAfter reads (0: never) with stopErr.
type gather struct {
	mu        sync.Mutex // reads, for a test on another goroutine
	t         *testing.T
	buf       []byte
	lent      bool
	got       []byte
	reads     int
	stopAfter int
	stopErr   error
	onRead    func()
	loopReads int // reads into a loop's buffer, not buf
}

// owns reports whether p lies in g.buf.
func (g *gather) owns(p []byte) bool {
	for i := range g.buf {
		if &g.buf[i] == &p[0] {
			return true
		}
	}
	return false
}

func (g *gather) Buffer() []byte {
	g.lent = true
	return g.buf
}

func (g *gather) Idle() { g.lent = false }

func (g *gather) Handle(p []byte) (bool, error) {
	if len(p) > 0 && g.owns(p) {
		if !g.lent {
			g.t.Error("Handle with no buffer lent")
		}
	} else if len(p) > 0 {
		g.loopReads++ // a loop's own buffer, lent for the call
	}
	g.got = append(g.got, p...)
	g.mu.Lock()
	g.reads++
	g.mu.Unlock()
	if g.onRead != nil {
		g.onRead()
	}
	if g.stopAfter > 0 && g.readsSeen() >= g.stopAfter {
		return false, g.stopErr
	}
	return true, nil
}

// TestReadEach runs ReadEach against a peer that writes pieces with
// pauses and then closes, stays silent, or aborts, with and without the
// hang-up watcher, and checks what it read and how it ended (an abort
// from Handle: no read after it, whether the loop would wait next or
// read on).
func TestReadEach(t *testing.T) {
	errStop := errors.New("stop")
	// Shared by the looped cases, as by a process's streams; its reads
	// as small as the smallest case's buffer, so those cases read on
	// without a wait there too.
	loops := &Loops{buf: 8}
	for _, tc := range []struct {
		name    string
		pieces  []string // written before ReadEach starts (first) and then apart
		end     string   // "close" after the pieces, "silent" (deadline), "abort" (from Handle)
		stop    int
		bufSize int
		want    string
		wantErr error
	}{
		{"bytes and FIN already queued", []string{"hello"}, "close", 0, 64, "hello", io.EOF},
		{"FIN after a pause", []string{"a", "b", "c"}, "close", 0, 64, "abc", io.EOF},
		{"reads larger than the buffer", []string{"0123456789abcdef0123"}, "close", 0, 8, "0123456789abcdef0123", io.EOF},
		{"handler stops", []string{"a", "b", "c"}, "silent", 2, 64, "ab", errStop},
		{"silent past the deadline", []string{"a"}, "silent", 0, 64, "a", os.ErrDeadlineExceeded},
		{"aborted while reading", []string{"a", "b"}, "abort", 0, 64, "a", os.ErrDeadlineExceeded},
		// Full reads read on without a wait (no deadline check of the
		// poller's between them): only the abort flag stops them.
		{"aborted while reading on without a wait", []string{"0123456789abcdef0123"}, "abort", 0, 8, "01234567", os.ErrDeadlineExceeded},
	} {
		for _, mode := range []struct{ watched, looped, detach bool }{{false, false, false}, {true, false, false}, {true, true, false}, {true, true, true}} {
			watched := mode.watched
			t.Run(fmt.Sprintf("%s/watched=%v/looped=%v/detach=%v", tc.name, watched, mode.looped, mode.detach), func(t *testing.T) {
				c, peer := pair(t)
				t.Cleanup(func() { _ = c.NetConn().Close() }) // the socket's, after a detach
				var w *HupWatcher
				if watched {
					w = new(HupWatcher)
				}
				g := &gather{t: t, buf: make([]byte, tc.bufSize), stopAfter: tc.stop, stopErr: errStop}
				if tc.end == "abort" {
					g.onRead = c.Abort
				}
				_, _ = io.WriteString(peer, tc.pieces[0])
				if tc.end == "close" && len(tc.pieces) == 1 {
					_ = peer.Close()
				}
				go func() {
					for _, p := range tc.pieces[1:] {
						time.Sleep(30 * time.Millisecond)
						if _, err := io.WriteString(peer, p); err != nil {
							return
						}
					}
					if tc.end == "close" {
						_ = peer.Close()
					}
				}()
				// A bound that ends the test when no FIN, stop or abort does.
				bound := 10 * time.Second
				if tc.end == "silent" && tc.stop == 0 {
					bound = 100 * time.Millisecond
				}
				_ = c.SetReadDeadline(time.Now().Add(bound))
				st := new(EachState) // held by the caller, as upstream does
				if mode.looped {
					st.Loops, st.Detach = loops, mode.detach
				}
				err := c.ReadEach(g, w, st)
				if mode.looped && rawIO && !loops.started() { // -race: the goroutine's own waits
					t.Fatal("no loop ran")
				}
				if _, moved := c.NetConn().(*fdConn); moved != (mode.detach && rawIO) {
					t.Fatalf("net.Conn after ReadEach: %T; detach=%v", c.NetConn(), mode.detach)
				}
				if string(g.got) != tc.want || !errors.Is(err, tc.wantErr) {
					t.Fatalf("watched=%v: read %q, %v; want %q, %v", watched, g.got, err, tc.want, tc.wantErr)
				}
				if g.lent {
					t.Fatal("the buffer is still lent after ReadEach returned")
				}
			})
		}
	}
}

// TestReadEachNoSocket checks that a connection without a plaintext TCP
// socket under it refuses ReadEach.
func TestReadEachNoSocket(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	c := New(a)
	if c.CanReadEach() {
		t.Fatal("a pipe claims a socket")
	}
	if err := c.ReadEach(&gather{t: t, buf: make([]byte, 8)}, nil, nil); err == nil {
		t.Fatal("ReadEach ran without a socket")
	}
}

func (g *gather) readsSeen() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.reads
}
