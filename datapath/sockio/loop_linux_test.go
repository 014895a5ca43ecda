//go:build linux

package sockio

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"
	"time"
)

// TestReadEachLoopAbort checks that Abort from another goroutine ends a
// ReadEach waiting in a loop (its goroutine is not in the poller's wait
// that Abort's past deadline ends) with the deadline error.
func TestReadEachLoopAbort(t *testing.T) {
	if !rawIO {
		t.Skip("no loops without raw calls (-race, non-Linux)")
	}
	for _, detach := range []bool{false, true} {
		t.Run(fmt.Sprintf("detach=%v", detach), func(t *testing.T) { testReadEachLoopAbort(t, detach) })
	}
}

func testReadEachLoopAbort(t *testing.T, detach bool) {
	c, peer := pair(t)
	t.Cleanup(func() { _ = c.NetConn().Close() }) // the socket's, after a detach
	ls := new(Loops)
	g := &gather{t: t, buf: make([]byte, 64)}
	_ = c.SetReadDeadline(time.Now().Add(time.Minute)) // far: only Abort ends it
	done := make(chan error, 1)
	go func() { done <- c.ReadEach(g, nil, &EachState{Loops: ls, Detach: detach}) }()
	if _, err := io.WriteString(peer, "a"); err != nil {
		t.Fatal(err)
	}
	for range 500 { // the byte relayed from the loop
		if ls.started() && g.readsSeen() > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.Abort()
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrDeadlineExceeded) || string(g.got) != "a" {
			t.Fatalf("read %q, %v; want %q, the deadline error", g.got, err, "a")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Abort did not end the loop's wait")
	}
}

// TestReadEachLoopStash relays, from one loop, a stream whose client
// never reads until told to and a second stream: the first one's write
// that would block is kept (the loop does not wait on that client), the
// second ends meanwhile, and the first's client then gets every byte in
// order.
// Both with the sockets detached from the runtime's poller and without.
func TestReadEachLoopStash(t *testing.T) {
	if !rawIO {
		t.Skip("Hold runs no step without raw calls (-race, non-Linux)")
	}
	for _, detach := range []bool{false, true} {
		t.Run(fmt.Sprintf("detach=%v", detach), func(t *testing.T) { testReadEachLoopStash(t, detach) })
	}
}

func testReadEachLoopStash(t *testing.T, detach bool) {
	ls := &Loops{size: 1} // both streams on the one loop
	big := make([]byte, 8<<20)
	for i := range big {
		big[i] = byte(i % 251)
	}
	eng, engPeer := pair(t)
	t.Cleanup(func() { _ = eng.NetConn().Close() }) // the socket's, after a detach
	cli, cliPeer := pair(t)
	_ = cli.SetReadDeadline(time.Now().Add(30 * time.Second))
	_ = cli.SetWriteDeadline(time.Now().Add(30 * time.Second))
	_ = eng.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(cliPeer, "go"); err != nil { // wakes the hold
		t.Fatal(err)
	}
	go func() {
		_, _ = engPeer.Write(big)
		_ = engPeer.Close()
	}()
	first := make(chan error, 1)
	go func() {
		var rerr error
		buf := make([]byte, 2)
		err := cli.Hold(func() bool {
			if _, err := cli.Read(buf); err != nil {
				rerr = err
				return false
			}
			w := &writeTo{c: cli, buf: make([]byte, 16<<10)}
			rerr = eng.ReadEach(w, nil, &EachState{Loops: ls, Client: cli, Detach: detach})
			return false
		})
		if err != nil {
			rerr = err
		}
		first <- rerr
	}()
	// The second stream, on the same loop, while the first client reads
	// nothing.
	eng2, eng2Peer := pair(t)
	t.Cleanup(func() { _ = eng2.NetConn().Close() })
	_ = eng2.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(eng2Peer, "second"); err != nil {
		t.Fatal(err)
	}
	_ = eng2Peer.Close()
	g := &gather{t: t, buf: make([]byte, 64)}
	second := make(chan error, 1)
	go func() { second <- eng2.ReadEach(g, nil, &EachState{Loops: ls, Detach: detach}) }()
	select {
	case err := <-second:
		if !errors.Is(err, io.EOF) || string(g.got) != "second" {
			t.Fatalf("second stream: read %q, %v; want %q, EOF", g.got, err, "second")
		}
		if g.loopReads == 0 {
			t.Error("second stream: no read into the loop's buffer")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the second stream did not end while the first one's client read nothing: the loop waited on it")
	}
	got, err := io.ReadAll(io.LimitReader(cliPeer, int64(len(big))))
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("first client: %d bytes (%v), want the %d written, in order", len(got), err, len(big))
	}
	if err := <-first; !errors.Is(err, io.EOF) {
		t.Fatalf("first stream: %v, want EOF", err)
	}
}

// writeTo is a ReadHandler that writes what it reads to c (the relay's
// shape: Emit writes the client in its Hold step).
type writeTo struct {
	c   *Conn
	buf []byte
}

func (w *writeTo) Buffer() []byte { return w.buf }
func (w *writeTo) Idle()          {}
func (w *writeTo) Handle(p []byte) (bool, error) {
	if _, err := w.c.Write(p); err != nil {
		return false, err
	}
	return true, nil
}

// TestReadEachLoopDetachReuse relays a stream from a loop with Detach
// and then uses the connection again, as the pool does after a stream
// that ended with its body: the socket, handed back under a new
// net.Conn, still carries bytes both ways with the deadlines asked for,
// the detach sent the peer no FIN, and closing the new net.Conn does
// (no other descriptor keeps the socket open).
func TestReadEachLoopDetachReuse(t *testing.T) {
	if !rawIO {
		t.Skip("no loops without raw calls (-race, non-Linux)")
	}
	errStop := errors.New("stop")
	for _, tc := range []struct {
		name  string
		abort bool // Abort while the stream is in the loop: the reuse fails
	}{
		{"ended by its handler", false},
		{"aborted in the loop", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, peer := pair(t)
			t.Cleanup(func() { _ = c.NetConn().Close() })
			ls := new(Loops)
			g := &gather{t: t, buf: make([]byte, 64), stopAfter: 2, stopErr: errStop}
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
			done := make(chan error, 1)
			go func() { done <- c.ReadEach(g, nil, &EachState{Loops: ls, Detach: true}) }()
			if _, err := io.WriteString(peer, "a"); err != nil {
				t.Fatal(err)
			}
			if tc.abort {
				for range 500 { // the byte relayed from the loop
					if g.readsSeen() > 0 {
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
				c.Abort()
			} else {
				time.Sleep(20 * time.Millisecond)
				if _, err := io.WriteString(peer, "b"); err != nil {
					t.Fatal(err)
				}
			}
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("ReadEach did not return")
			}
			if _, ok := c.NetConn().(*fdConn); !ok {
				t.Fatalf("net.Conn after ReadEach: %T, want the socket handed back (*fdConn)", c.NetConn())
			}
			if tc.abort {
				if !errors.Is(err, os.ErrDeadlineExceeded) || string(g.got) != "a" {
					t.Fatalf("read %q, %v; want %q, the deadline error", g.got, err, "a")
				}
				if _, err := c.Write([]byte("x")); !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("write after Abort: %v, want the deadline error (Abort outlives the hand-back)", err)
				}
				return
			}
			if !errors.Is(err, errStop) || string(g.got) != "ab" {
				t.Fatalf("read %q, %v; want %q, the handler's stop", g.got, err, "ab")
			}
			_ = peer.SetReadDeadline(time.Now().Add(10 * time.Second))
			buf := make([]byte, 16)
			if _, err := c.Write([]byte("next")); err != nil {
				t.Fatalf("write after the stream: %v", err)
			}
			if n, err := io.ReadFull(peer, buf[:4]); err != nil || string(buf[:n]) != "next" {
				t.Fatalf("peer read %q, %v; want %q (and no FIN from the detach)", buf[:n], err, "next")
			}
			if _, err := io.WriteString(peer, "answer"); err != nil {
				t.Fatal(err)
			}
			if n, err := io.ReadFull(c, buf[:6]); err != nil || string(buf[:n]) != "answer" {
				t.Fatalf("read after the stream %q, %v; want %q", buf[:n], err, "answer")
			}
			// A second stream on the handed-back socket detaches it again.
			first := c.NetConn()
			g2 := &gather{t: t, buf: make([]byte, 64), stopAfter: 1, stopErr: errStop}
			if _, err := io.WriteString(peer, "again"); err != nil {
				t.Fatal(err)
			}
			if err := c.ReadEach(g2, nil, &EachState{Loops: ls, Detach: true}); !errors.Is(err, errStop) || string(g2.got) != "again" {
				t.Fatalf("second stream: read %q, %v; want %q, the handler's stop", g2.got, err, "again")
			}
			if c.NetConn() == first {
				t.Fatal("the second stream's socket was not handed back anew")
			}
			_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			if _, err := c.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("read of a silent peer: %v, want the deadline asked for", err)
			}
			if err := c.NetConn().Close(); err != nil {
				t.Fatal(err)
			}
			if n, err := peer.Read(buf); n != 0 || !errors.Is(err, io.EOF) {
				t.Fatalf("peer after the close: %d bytes, %v; want EOF (no descriptor left open)", n, err)
			}
		})
	}
}

// TestOpTable: ids are never 0, a slot is reused after its stream left,
// and an id from before the reuse finds nothing and removes nothing.
func TestOpTable(t *testing.T) {
	a, b, c := new(eachOp), new(eachOp), new(eachOp)
	type step struct {
		do   string // add, remove, get
		op   *eachOp
		id   int     // index into the ids added so far
		want *eachOp // get's answer
		live int
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"add and get", []step{{do: "add", op: a, live: 1}, {do: "add", op: b, live: 2}, {do: "get", id: 0, want: a, live: 2}, {do: "get", id: 1, want: b, live: 2}}},
		{"removed", []step{{do: "add", op: a, live: 1}, {do: "remove", id: 0, live: 0}, {do: "get", id: 0, live: 0}, {do: "remove", id: 0, live: 0}}},
		{"slot reused", []step{{do: "add", op: a, live: 1}, {do: "remove", id: 0, live: 0}, {do: "add", op: c, live: 1},
			{do: "get", id: 0, live: 1}, {do: "remove", id: 0, live: 1}, {do: "get", id: 1, want: c, live: 1}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var tab opTable
			var ids []uint64
			for i, st := range tc.steps {
				switch st.do {
				case "add":
					id := tab.add(st.op)
					if id == 0 {
						t.Fatalf("step %d: id 0", i)
					}
					ids = append(ids, id)
				case "remove":
					tab.remove(ids[st.id])
				case "get":
					if got := tab.get(ids[st.id]); got != st.want {
						t.Errorf("step %d: get %p, want %p", i, got, st.want)
					}
				}
				if tab.live != st.live {
					t.Errorf("step %d: live %d, want %d", i, tab.live, st.live)
				}
			}
			if tab.get(1<<40|12345) != nil {
				t.Error("an id never given found a stream")
			}
		})
	}
}

// TestLoopsFor: a loop per procsPerLoop Ps, never none.
func TestLoopsFor(t *testing.T) {
	for _, tc := range []struct{ procs, want int }{
		{0, 1}, {1, 1}, {2, 2}, {3, 3}, {8, 8}, {64, 64},
	} {
		if got := loopsFor(tc.procs); got != tc.want {
			t.Errorf("loopsFor(%d) = %d, want %d", tc.procs, got, tc.want)
		}
	}
}

// TestWriteFrameAfterStash: once a loop stream's client write was kept
// for its goroutine, WriteFrame declines (the caller's Write then keeps
// the bytes after the kept ones) and writes nothing.
func TestWriteFrameAfterStash(t *testing.T) {
	if !rawIO {
		t.Skip("Hold runs no step without raw calls (-race, non-Linux)")
	}
	c, peer := pair(t)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := peer.Write([]byte("go")); err != nil { // wakes the hold
		t.Fatal(err)
	}
	op := new(eachOp)
	op.stalled = true
	var ok bool
	var werr error
	buf := make([]byte, 8)
	if err := c.Hold(func() bool {
		if _, err := c.Read(buf); err != nil {
			t.Error(err)
			return false
		}
		c.stash = op
		ok, werr = c.WriteFrame([]byte("1\r\n"), []byte("x"), []byte("\r\n"))
		c.stash = nil
		return false
	}); err != nil {
		t.Fatalf("Hold: %v", err)
	}
	if ok || werr != nil || c.Written() != 0 || len(op.tail) != 0 {
		t.Fatalf("WriteFrame after a stash: %v, %v, written %d, stash %q", ok, werr, c.Written(), op.tail)
	}
}

// stampAt is a ReadHandler that keeps, for each read, the state's ReadAt.
type stampAt struct {
	st  *EachState
	buf []byte
	at  []Mono
}

func (s *stampAt) Buffer() []byte { return s.buf }
func (s *stampAt) Idle()          {}
func (s *stampAt) Handle(p []byte) (bool, error) {
	s.at = append(s.at, s.st.ReadAt())
	return len(s.at) < 2, nil
}

// TestReadEachReadAt: a read from a loop is handed the loop's clock
// reading for its batch, made after the bytes were sent; a read in the
// caller's own wait is handed none.
func TestReadEachReadAt(t *testing.T) {
	if !rawIO {
		t.Skip("no loops without raw calls (-race, non-Linux)")
	}
	for _, tc := range []struct {
		name   string
		loops  bool
		stamps bool // ReadAt is a reading, not NoDeadline
	}{
		{"from a loop", true, true},
		{"in its own wait", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, peer := pair(t)
			t.Cleanup(func() { _ = c.NetConn().Close() })
			st := &EachState{}
			if tc.loops {
				st.Loops = new(Loops)
			}
			h := &stampAt{st: st, buf: make([]byte, 64)}
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			done := make(chan error, 1)
			go func() { done <- c.ReadEach(h, nil, st) }()
			var sent []Mono
			for _, b := range []string{"a", "b"} {
				time.Sleep(20 * time.Millisecond) // two reads, not one
				sent = append(sent, Now())
				if _, err := io.WriteString(peer, b); err != nil {
					t.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				t.Fatalf("ReadEach: %v", err)
			}
			after := Now()
			if len(h.at) != 2 {
				t.Fatalf("%d reads, want 2", len(h.at))
			}
			for i, at := range h.at {
				switch {
				case !tc.stamps && at != NoDeadline:
					t.Errorf("read %d: ReadAt %d; want NoDeadline outside a loop", i, at)
				case tc.stamps && (at < sent[i] || at > after):
					t.Errorf("read %d: ReadAt %d; want a reading in [%d, %d]", i, at, sent[i], after)
				}
			}
		})
	}
}
