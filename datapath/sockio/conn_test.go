package sockio

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// pair returns a connected loopback TCP pair: ours wrapped in a Conn.
func pair(t *testing.T) (*Conn, net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		nc, _ := l.Accept()
		acc <- nc
	}()
	nc, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer := <-acc
	if peer == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { _ = nc.Close(); _ = peer.Close() })
	return New(nc), peer
}

// wrapped is a connection wrapper that exposes what it wraps (as the
// admission layer's does).
type wrapped struct{ net.Conn }

func (w wrapped) NetConn() net.Conn { return w.Conn }

func TestRawOnlyForPlainTCP(t *testing.T) {
	c, peer := pair(t)
	tcp := c.NetConn()
	for _, tc := range []struct {
		name string
		nc   net.Conn
		raw  bool
	}{
		{"tcp", tcp, true},
		{"wrapped tcp", wrapped{tcp}, true},
		{"tls over tcp", tls.Client(tcp, &tls.Config{}), false},
		{"wrapped tls", wrapped{tls.Client(tcp, &tls.Config{})}, false},
		{"accepted tcp", peer.(*net.TCPConn), true},
	} {
		if got := New(tc.nc).raw != nil; got != tc.raw {
			t.Errorf("%s: raw socket %v, want %v", tc.name, got, tc.raw)
		}
	}
	p1, p2 := net.Pipe()
	defer p1.Close()
	defer p2.Close()
	if New(p1).raw != nil {
		t.Error("pipe: a raw socket on a connection without one")
	}
}

func TestReadWriteEOF(t *testing.T) {
	c, peer := pair(t)
	if n, err := c.Write([]byte("hello")); n != 5 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(peer, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("peer read %q, %v", buf, err)
	}
	if _, err := peer.Write([]byte("back")); err != nil {
		t.Fatal(err)
	}
	if n, err := io.ReadFull(c, buf[:4]); n != 4 || err != nil || string(buf[:4]) != "back" {
		t.Fatalf("Read = %q, %v", buf[:n], err)
	}
	_ = peer.Close()
	if n, err := c.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("Read after the peer closed = %d, %v, want 0, EOF", n, err)
	}
}

// TestLazyDeadlines checks that a later deadline asked for over an armed
// earlier one holds for its whole length (reads and writes go on past the
// armed one), that a nearer one takes effect at once, and that Abort ends
// a read under a far deadline for good.
func TestLazyDeadlines(t *testing.T) {
	t.Run("read past the armed deadline", func(t *testing.T) {
		c, peer := pair(t)
		_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second)) // later: not set on the socket
		time.AfterFunc(200*time.Millisecond, func() { _, _ = peer.Write([]byte("x")) })
		buf := make([]byte, 1)
		if n, err := c.Read(buf); n != 1 || err != nil {
			t.Fatalf("Read = %d, %v; want the byte sent after the armed deadline", n, err)
		}
	})
	t.Run("nearer read deadline", func(t *testing.T) {
		c, _ := pair(t)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		start := time.Now()
		_, err := c.Read(make([]byte, 1))
		if !errors.Is(err, os.ErrDeadlineExceeded) || time.Since(start) > 2*time.Second {
			t.Fatalf("Read = %v after %v, want a timeout at 50ms", err, time.Since(start))
		}
	})
	t.Run("write past the armed deadline", func(t *testing.T) {
		c, peer := pair(t)
		_ = c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
		_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		big := make([]byte, 32<<20) // more than the socket buffers hold
		got := make(chan int64, 1)
		go func() {
			time.Sleep(200 * time.Millisecond) // the armed deadline passes mid-write
			n, _ := io.Copy(io.Discard, io.LimitReader(peer, int64(len(big))))
			got <- n
		}()
		if n, err := c.Write(big); n != len(big) || err != nil {
			t.Fatalf("Write = %d, %v; want all of it", n, err)
		}
		if n := <-got; n != int64(len(big)) {
			t.Fatalf("peer read %d bytes, want %d", n, len(big))
		}
	})
	t.Run("abort under a far deadline", func(t *testing.T) {
		c, _ := pair(t)
		_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		time.AfterFunc(100*time.Millisecond, c.Abort)
		start := time.Now()
		_, err := c.Read(make([]byte, 1))
		if err == nil || time.Since(start) > 2*time.Second {
			t.Fatalf("Read = %v after %v, want the abort's error at once", err, time.Since(start))
		}
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatal("Read after Abort succeeded")
		}
	})
}

func TestQuiet(t *testing.T) {
	for _, tc := range []struct {
		name  string
		peer  func(net.Conn)
		armed time.Duration // > 0: an earlier exchange's read deadline, passed while idle
		quiet bool
	}{
		{"idle", func(net.Conn) {}, 0, true},
		{"idle past an armed deadline", func(net.Conn) {}, 20 * time.Millisecond, true},
		{"bytes pending", func(p net.Conn) { _, _ = p.Write([]byte("x")) }, 0, false},
		{"closed by the peer", func(p net.Conn) { _ = p.Close() }, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, peer := pair(t)
			if tc.armed > 0 {
				_ = c.SetReadDeadline(time.Now().Add(tc.armed))
				_ = c.SetReadDeadline(time.Time{}) // the next exchange: lazily none
			}
			tc.peer(peer)
			time.Sleep(tc.armed + 50*time.Millisecond)
			if got := c.Quiet(); got != tc.quiet {
				t.Fatalf("Quiet = %v, want %v", got, tc.quiet)
			}
		})
	}
}

// TestWaitReadable checks what ends a wait: the peer's bytes (not an armed
// deadline earlier than the one asked for, which is re-armed), the deadline
// asked for, or Abort; the Read that follows reports which.
func TestWaitReadable(t *testing.T) {
	const step = 100 * time.Millisecond
	for _, tc := range []struct {
		name        string
		setup       func(c *Conn, peer net.Conn) // before the wait
		minWait     time.Duration
		wantData    bool
		wantErr     error
		wantAborted bool
	}{
		{name: "peer sends", minWait: step, wantData: true, setup: func(c *Conn, peer net.Conn) {
			time.AfterFunc(step, func() { _, _ = peer.Write([]byte("x")) })
		}},
		{name: "peer sends past an earlier armed deadline", minWait: 2 * step, wantData: true, setup: func(c *Conn, peer net.Conn) {
			_ = c.SetReadDeadline(time.Now().Add(step / 2))
			_ = c.SetReadDeadline(time.Now().Add(10 * step)) // lazy: the earlier one stays armed
			time.AfterFunc(2*step, func() { _, _ = peer.Write([]byte("x")) })
		}},
		{name: "deadline passes", minWait: step, wantErr: os.ErrDeadlineExceeded, setup: func(c *Conn, _ net.Conn) {
			_ = c.SetReadDeadline(time.Now().Add(step))
		}},
		{name: "abort", minWait: step, wantErr: os.ErrDeadlineExceeded, wantAborted: true, setup: func(c *Conn, _ net.Conn) {
			time.AfterFunc(step, c.Abort)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, peer := pair(t)
			tc.setup(c, peer)
			start := time.Now()
			c.WaitReadable()
			if d := time.Since(start); d < tc.minWait-step/5 || d > tc.minWait+20*step {
				t.Fatalf("waited %v, want about %v", d, tc.minWait)
			}
			checkAfterWait(t, c, tc.wantData, tc.wantErr, tc.wantAborted)
		})
	}
}

// checkAfterWait reads once after a wait ended: the peer's one byte when
// wantData, else wantErr; and c aborted or not as wantAborted.
func checkAfterWait(t *testing.T, c *Conn, wantData bool, wantErr error, wantAborted bool) {
	t.Helper()
	n, err := c.Read(make([]byte, 8))
	if wantData && (n != 1 || err != nil) {
		t.Fatalf("read after the wait: %d, %v; want the peer's byte", n, err)
	}
	if !wantData && !errors.Is(err, wantErr) {
		t.Fatalf("read after the wait: %d, %v; want %v", n, err, wantErr)
	}
	if c.Aborted() != wantAborted {
		t.Fatalf("aborted %v, want %v", c.Aborted(), wantAborted)
	}
}

func TestAwaitReply(t *testing.T) {
	const step = 100 * time.Millisecond
	small := []byte("hello")
	large := make([]byte, 8<<20) // past the socket buffers: the write cannot finish in one go
	for _, tc := range []struct {
		name        string
		req         []byte
		setup       func(c *Conn)
		peer        func(peer net.Conn) // after reading the request
		minWait     time.Duration       // Write's, on the raw socket
		wantData    bool
		wantErr     error
		wantAborted bool
	}{
		{name: "peer answers", req: small, minWait: step, wantData: true, peer: func(peer net.Conn) {
			time.Sleep(step)
			_, _ = peer.Write([]byte("x"))
		}},
		{name: "large request", req: large, wantData: true, peer: func(peer net.Conn) {
			_, _ = peer.Write([]byte("x"))
		}},
		{name: "peer closes", req: small, minWait: step, wantErr: io.EOF, peer: func(peer net.Conn) {
			time.Sleep(step)
			_ = peer.Close()
		}},
		{name: "deadline passes", req: small, minWait: step, wantErr: os.ErrDeadlineExceeded, setup: func(c *Conn) {
			_ = c.SetReadDeadline(time.Now().Add(step))
		}},
		{name: "abort", req: small, minWait: step, wantErr: os.ErrDeadlineExceeded, wantAborted: true, setup: func(c *Conn) {
			time.AfterFunc(step, c.Abort)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, peer := pair(t)
			if tc.setup != nil {
				tc.setup(c)
			}
			got := make(chan error, 1)
			go func() {
				buf := make([]byte, len(tc.req))
				_, err := io.ReadFull(peer, buf)
				if err == nil && tc.peer != nil {
					tc.peer(peer)
				}
				got <- err
			}()
			c.AwaitReply(true)
			start := time.Now()
			n, err := c.Write(tc.req)
			waited := time.Since(start)
			c.AwaitReply(false)
			if n != len(tc.req) || err != nil {
				t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(tc.req))
			}
			if rawIO && (waited < tc.minWait-step/5 || waited > tc.minWait+20*step) {
				t.Fatalf("Write returned after %v, want about %v", waited, tc.minWait)
			}
			if err := <-got; err != nil {
				t.Fatalf("peer read the request: %v", err)
			}
			checkAfterWait(t, c, tc.wantData, tc.wantErr, tc.wantAborted)
		})
	}
}

// TestAwaitReplyAfterEarlierWrite: a reply to an earlier write of the same
// request (an engine answering on the head, before the body's last bytes)
// may be in before the awaited write; the wait must not miss it and last
// until the read deadline.
func TestAwaitReplyAfterEarlierWrite(t *testing.T) {
	c, peer := pair(t)
	if _, err := c.Write([]byte("head")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(peer, buf); err != nil {
		t.Fatal(err)
	}
	if _, err := peer.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the early reply is in
	const deadline = 2 * time.Second
	_ = c.SetReadDeadline(time.Now().Add(deadline))
	c.AwaitReply(true)
	start := time.Now()
	n, err := c.Write([]byte("body"))
	waited := time.Since(start)
	c.AwaitReply(false)
	if n != 4 || err != nil {
		t.Fatalf("Write = %d, %v; want 4, nil", n, err)
	}
	if waited > deadline/2 {
		t.Fatalf("Write waited %v for a reply already in", waited)
	}
	if n, err := c.Read(make([]byte, 8)); n != 1 || err != nil {
		t.Fatalf("read after the write: %d, %v; want the peer's byte", n, err)
	}
}

// TestHold runs a step inside one read wait the way the lean front end
// does (read until the socket is empty, answer, wait only once Drained)
// with the peer's bytes arriving before the hold, while the step is busy
// answering (after its last read, before the wait is armed), and after the
// answer: every byte must be seen without a read deadline passing.
func TestHold(t *testing.T) {
	if !rawIO {
		t.Skip("Hold runs no step without raw calls (-race, non-Linux)")
	}
	tests := []struct {
		name  string
		early string // sent before Hold starts
		busy  string // sent by the step after its last read
		late  string // sent once the answer was read
	}{
		{name: "before the hold", early: "ab"},
		{name: "while the step is busy", early: "a", busy: "b"},
		{name: "after the answer", early: "a", late: "b"},
		{name: "all three", early: "a", busy: "b", late: "c"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, peer := pair(t)
			_ = peer.SetDeadline(time.Now().Add(5 * time.Second))
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.WriteString(peer, tc.early); err != nil {
				t.Fatal(err)
			}
			lateSent := make(chan error, 1)
			go func() {
				ok := make([]byte, 2)
				_, err := io.ReadFull(peer, ok)
				if err == nil && tc.late != "" {
					_, err = io.WriteString(peer, tc.late)
				}
				lateSent <- err
			}()
			want := tc.early + tc.busy + tc.late
			var got []byte
			var readErr error
			answered := false
			buf := make([]byte, 64)
			err := c.Hold(func() bool {
				for {
					n, err := c.Read(buf)
					got = append(got, buf[:n]...)
					if err != nil && !errors.Is(err, ErrWouldBlock) {
						readErr = err
						return false
					}
					if len(got) == len(want) {
						if !answered {
							_, _ = c.Write([]byte("ok"))
						}
						return false
					}
					if !c.Drained() {
						continue
					}
					if !answered {
						answered = true
						if tc.busy != "" {
							_, _ = io.WriteString(peer, tc.busy) // not read before the wait
						}
						_, _ = c.Write([]byte("ok"))
					}
					return true
				}
			})
			if err != nil || readErr != nil {
				t.Fatalf("Hold: %v, read: %v (got %q of %q)", err, readErr, got, want)
			}
			if string(got) != want {
				t.Fatalf("got %q, want %q", got, want)
			}
			if err := <-lateSent; err != nil {
				t.Fatalf("peer: %v", err)
			}
		})
	}
}

// TestWriteInStep checks Write inside Hold's step, which writes straight
// to the held descriptor and waits through the RawConn only for what the
// socket does not take at once: every byte arrives in order and is counted
// once, a write that must wait past its deadline stops with the deadline's
// error, an aborted connection writes nothing, and a write to a socket shut
// down under the step (h1's cut, racing with the write) fails with the
// socket's error and counts nothing.
func TestWriteInStep(t *testing.T) {
	if !rawIO {
		t.Skip("Hold runs no step without raw calls (-race, non-Linux)")
	}
	big := make([]byte, 16<<20) // past both sockets' buffers: the rest waits for room
	for i := range big {
		big[i] = byte(i % 251)
	}
	tests := []struct {
		name     string
		p        []byte
		peerRead bool          // the peer reads (else it never does)
		deadline time.Duration // the write deadline from now (0: none)
		abort    bool
		shut     bool  // the socket's write side shut down in the step, no Abort
		wantErr  error // nil, os.ErrDeadlineExceeded, syscall.EPIPE
		wantAll  bool  // every byte written and received
	}{
		{name: "small", p: []byte("data: x\n\n"), peerRead: true, wantAll: true},
		{name: "past the socket buffers", p: big, peerRead: true, deadline: 10 * time.Second, wantAll: true},
		{name: "a peer that never reads", p: big, deadline: 200 * time.Millisecond, wantErr: os.ErrDeadlineExceeded},
		{name: "aborted", p: []byte("data: x\n\n"), peerRead: true, abort: true, wantErr: os.ErrDeadlineExceeded},
		{name: "shut down", p: []byte("data: x\n\n"), peerRead: true, shut: true, wantErr: syscall.EPIPE},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, peer := pair(t)
			_ = peer.SetDeadline(time.Now().Add(10 * time.Second))
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if tc.deadline > 0 {
				_ = c.SetWriteDeadline(time.Now().Add(tc.deadline))
			}
			if _, err := io.WriteString(peer, "go"); err != nil { // wakes the hold
				t.Fatal(err)
			}
			received := make(chan []byte, 1)
			if tc.peerRead {
				go func() {
					got, _ := io.ReadAll(peer)
					received <- got
				}()
			}
			var n int
			var werr error
			buf := make([]byte, 8)
			err := c.Hold(func() bool {
				if _, err := c.Read(buf); err != nil {
					werr = err
					return false
				}
				if !c.InStep() {
					t.Error("not in the step")
				}
				if tc.abort {
					c.Abort()
				}
				if tc.shut && c.InStep() {
					if err := syscall.Shutdown(int(c.holdFD), syscall.SHUT_WR); err != nil {
						t.Error(err)
					}
				}
				n, werr = c.Write(tc.p)
				return false
			})
			if err != nil {
				t.Fatalf("Hold: %v", err)
			}
			switch {
			case tc.wantErr == nil && werr != nil:
				t.Fatalf("Write: %d bytes, %v", n, werr)
			case tc.wantErr != nil && !errors.Is(werr, tc.wantErr):
				t.Fatalf("Write: %d bytes, %v; want %v", n, werr, tc.wantErr)
			}
			if got := c.Written(); got != uint64(n) {
				t.Errorf("Written %d, Write returned %d", got, n)
			}
			if (tc.abort || tc.shut) && n != 0 {
				t.Errorf("%s: %d bytes written", tc.name, n)
			}
			if !tc.wantAll {
				if n >= len(tc.p) {
					t.Errorf("%d of %d bytes written to a peer that never reads", n, len(tc.p))
				}
				return
			}
			_ = c.NetConn().Close()
			got := <-received
			if n != len(tc.p) || string(got) != string(tc.p) {
				t.Fatalf("wrote %d of %d bytes, peer received %d, equal %v", n, len(tc.p), len(got), string(got) == string(tc.p))
			}
		})
	}
}

// TestWriteFrame: a frame is written whole, in order, inside Hold's step
// (the rest of what the socket does not take at once through the wait),
// and not at all outside it.
func TestWriteFrame(t *testing.T) {
	big := make([]byte, 16<<20) // past both sockets' buffers: the rest waits for room
	for i := range big {
		big[i] = byte(i % 251)
	}
	tests := []struct {
		name    string
		p       []byte
		inStep  bool // written inside Hold's step (else before it)
		await   bool // AwaitReply on: the write must wait for the reply, WriteFrame declines
		aborted bool
		full    bool // the socket filled first, the peer reading only later: the whole frame waits
		shut    bool // the socket's write side shut down first: the writev fails
		wantOK  bool // WriteFrame wrote (else it declined and wrote nothing)
		wantErr error
	}{
		{name: "in the step", p: []byte("data: x\n\n"), inStep: true, wantOK: rawIO},
		{name: "past the socket buffers", p: big, inStep: true, wantOK: rawIO},
		{name: "empty data", p: nil, inStep: true, wantOK: rawIO},
		{name: "a full socket", p: []byte("data: x\n\n"), inStep: true, full: true, wantOK: rawIO},
		{name: "shut down", p: []byte("data: x\n\n"), inStep: true, shut: true, wantOK: rawIO, wantErr: syscall.EPIPE},
		{name: "outside a step", p: []byte("data: x\n\n")},
		{name: "awaiting a reply", p: []byte("data: x\n\n"), inStep: true, await: true},
		{name: "aborted", p: []byte("data: x\n\n"), inStep: true, aborted: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, peer := pair(t)
			_ = peer.SetDeadline(time.Now().Add(10 * time.Second))
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
			received := make(chan []byte, 1)
			gate := make(chan struct{})
			if !tc.full {
				close(gate)
			}
			go func() {
				<-gate
				got, _ := io.ReadAll(peer)
				received <- got
			}()
			head, tail := []byte("1a\r\n"), []byte("\r\n")
			var filled []byte
			var ok bool
			var werr error
			frame := func() {
				c.AwaitReply(tc.await)
				if tc.aborted {
					c.Abort()
				}
				if tc.full {
					chunk := make([]byte, 64<<10)
					for {
						n, errno := rawWrite(c.holdFD, chunk)
						filled = append(filled, chunk[:n]...)
						if errno != 0 {
							break
						}
					}
					time.AfterFunc(50*time.Millisecond, func() { close(gate) })
				}
				if tc.shut && c.InStep() {
					if err := syscall.Shutdown(int(c.holdFD), syscall.SHUT_WR); err != nil {
						t.Error(err)
					}
				}
				ok, werr = c.WriteFrame(head, tc.p, tail)
			}
			if tc.inStep && rawIO {
				if _, err := peer.Write([]byte("go")); err != nil { // wakes the hold
					t.Fatal(err)
				}
				buf := make([]byte, 8)
				if err := c.Hold(func() bool {
					if _, err := c.Read(buf); err != nil {
						t.Error(err)
						return false
					}
					frame()
					return false
				}); err != nil {
					t.Fatalf("Hold: %v", err)
				}
			} else {
				frame()
			}
			wantErr := tc.wantErr
			if !tc.wantOK {
				wantErr = nil // declined: nothing written, nothing failed
			}
			if ok != tc.wantOK || !errors.Is(werr, wantErr) || wantErr == nil && werr != nil {
				t.Fatalf("WriteFrame: %v, %v; want %v, %v", ok, werr, tc.wantOK, wantErr)
			}
			want := ""
			if ok && werr == nil {
				want = string(head) + string(tc.p) + string(tail)
			}
			if got := c.Written(); got != uint64(len(want)) {
				t.Errorf("Written %d, want %d", got, len(want))
			}
			want = string(filled) + want // Written counts WriteFrame's bytes alone
			_ = c.NetConn().Close()
			if got := <-received; string(got) != want {
				t.Fatalf("peer received %d bytes, want %d (equal %v)", len(got), len(want), string(got) == want)
			}
		})
	}
}

// TestConnWriteFieldsFirst holds what a Write inside Hold's step reads in
// the Conn's first 40 bytes, which h1's connection places on one cache
// line with its write buffer's pointer (h1's TestConnLayout).
func TestConnWriteFieldsFirst(t *testing.T) {
	var c Conn
	for _, f := range []struct {
		name string
		end  uintptr
	}{
		{"raw", unsafe.Offsetof(c.raw) + unsafe.Sizeof(c.raw)},
		{"written", unsafe.Offsetof(c.written) + unsafe.Sizeof(c.written)},
		{"holdFD", unsafe.Offsetof(c.holdFD) + unsafe.Sizeof(c.holdFD)},
		{"aborted", unsafe.Offsetof(c.aborted) + unsafe.Sizeof(c.aborted)},
		{"holding", unsafe.Offsetof(c.holding) + 1},
		{"unanswered", unsafe.Offsetof(c.unanswered) + 1},
		{"awaitReply", unsafe.Offsetof(c.awaitReply) + 1},
	} {
		if f.end > 40 {
			t.Errorf("%s ends at byte %d, want it in the first 40", f.name, f.end)
		}
	}
}

// TestReleaseOnReplyWait: the release runs at most once, only when a
// Write with AwaitReply on has put all its bytes out (it scribbles over
// them: the peer must still receive them whole), and for a small request
// before the wait (the peer answers only after it saw it run).
func TestReleaseOnReplyWait(t *testing.T) {
	for _, tc := range []struct {
		name        string
		size        int
		wantRelease bool // before the answer, on the raw socket
	}{
		{name: "small request", size: 5, wantRelease: true},
		{name: "large request", size: 8 << 20}, // may or may not finish inside the wait
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, peer := pair(t)
			req := make([]byte, tc.size)
			for i := range req {
				req[i] = byte('a' + i%26)
			}
			sent := append([]byte(nil), req...)
			released := make(chan struct{}, 2)
			c.ReleaseOnReplyWait(func() {
				for i := range req {
					req[i] = 0xff
				}
				released <- struct{}{}
			})
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second)) // bounds a wait nothing ends
			type seen struct {
				got     []byte
				release bool
			}
			peerSaw := make(chan seen, 1)
			go func() {
				var s seen
				s.got = make([]byte, tc.size)
				_, _ = io.ReadFull(peer, s.got)
				if tc.wantRelease && rawIO {
					select {
					case <-released:
						s.release = true
					case <-time.After(5 * time.Second):
					}
				}
				peerSaw <- s
				_, _ = peer.Write([]byte("x"))
			}()
			c.AwaitReply(true)
			n, err := c.Write(req)
			c.AwaitReply(false)
			if n != tc.size || err != nil {
				t.Fatalf("Write = %d, %v; want %d, nil", n, err, tc.size)
			}
			s := <-peerSaw
			if !bytes.Equal(s.got, sent) {
				t.Fatal("the peer did not receive the request as written: bytes read after the release")
			}
			total := len(released)
			if s.release {
				total++
			}
			if total > 1 {
				t.Fatalf("released %d times", total)
			}
			if want := tc.wantRelease && rawIO; s.release != want {
				t.Fatalf("release seen before the answer: %v, want %v", s.release, want)
			}
			if !rawIO && total != 0 {
				t.Fatal("released without a wait inside the write")
			}
		})
	}
}

// TestReadOnReply: the reply is read inside the write's wait (on the raw
// socket), in place; a step that finds the socket empty after reading
// waits on for more, and a wait ended by the deadline runs no step and
// leaves the deadline for the next read to report.
func TestReadOnReply(t *testing.T) {
	const step = 50 * time.Millisecond
	for _, tc := range []struct {
		name     string
		peer     func(peer net.Conn) // after reading the request
		deadline bool                // a read deadline ends the wait
		want     string              // read inside the wait, on the raw socket
		wantErr  error               // the step's last read's error
		after    error               // the next Read's, when no step ran
	}{
		{name: "answer in one piece", want: "answer", peer: func(peer net.Conn) {
			_, _ = peer.Write([]byte("answer"))
		}},
		{name: "answer in two pieces: waits on between them", want: "answer", peer: func(peer net.Conn) {
			_, _ = peer.Write([]byte("ans"))
			time.Sleep(step)
			_, _ = peer.Write([]byte("wer"))
		}},
		{name: "peer closes", wantErr: io.EOF, peer: func(peer net.Conn) {
			_ = peer.Close()
		}},
		{name: "deadline passes", deadline: true, after: os.ErrDeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, peer := pair(t)
			var got []byte
			var lastErr error
			steps := 0
			c.ReadOnReply(func() bool {
				steps++
				if !c.InStep() {
					t.Error("ReadOnReply's step runs outside a step")
				}
				for {
					buf := make([]byte, 16)
					n, err := c.Read(buf)
					got = append(got, buf[:n]...)
					if err == ErrWouldBlock {
						return len(got) < len("answer") // more to come: wait on
					}
					if err != nil {
						lastErr = err
						return false
					}
				}
			})
			if tc.deadline {
				_ = c.SetReadDeadline(time.Now().Add(step))
			}
			go func() {
				_, _ = io.ReadFull(peer, make([]byte, 3))
				if tc.peer != nil {
					tc.peer(peer)
				}
			}()
			c.AwaitReply(true)
			n, err := c.Write([]byte("req"))
			c.AwaitReply(false)
			if n != 3 || err != nil {
				t.Fatalf("Write = %d, %v", n, err)
			}
			if !rawIO || tc.deadline {
				if steps != 0 {
					t.Fatalf("%d steps ran, want none", steps)
				}
				if tc.after != nil {
					if _, err := c.Read(make([]byte, 8)); !errors.Is(err, tc.after) {
						t.Fatalf("read after the wait: %v, want %v", err, tc.after)
					}
				}
				return
			}
			if string(got) != tc.want || !errors.Is(lastErr, tc.wantErr) && lastErr != tc.wantErr {
				t.Fatalf("read in the wait %q, %v; want %q, %v", got, lastErr, tc.want, tc.wantErr)
			}
			if c.InStep() {
				t.Fatal("still in a step after the write")
			}
		})
	}
}
