package upstream

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/datapath/sockio"
)

// afterEngine answers each request on a connection with "HTTP/1.1 200"
// and the body "ok<n>" (n counts the engine's answers), then runs after
// (when set) on the connection: what an engine does between answers.
type afterEngine struct {
	ln       net.Listener
	accepted atomic.Int64
	answers  atomic.Int64
	after    func(nc net.Conn) (keep bool)
	done     chan struct{} // a value per after() that returned
}

func startAfterEngine(t *testing.T, after func(net.Conn) bool) *afterEngine {
	e := &afterEngine{after: after, done: make(chan struct{}, 16)}
	e.ln = serveEach(t, func(nc net.Conn) {
		e.accepted.Add(1)
		e.serve(nc)
	})
	return e
}

// serveEach listens on loopback and runs serve for each connection on a
// goroutine of its own, until the test ends.
func serveEach(t *testing.T, serve func(net.Conn)) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go serve(nc)
		}
	}()
	return ln
}

// releaseGate returns a channel the test closes to let its engine go on;
// cleanup closes it when the test ended before that, so the engine's
// goroutine does not outlive the test.
func releaseGate(t *testing.T) chan struct{} {
	gate := make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-gate:
		default:
			close(gate)
		}
	})
	return gate
}

func (e *afterEngine) serve(nc net.Conn) {
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(nc)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		body := "ok" + strconv.FormatInt(e.answers.Add(1), 10)
		_, _ = io.WriteString(nc, "HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
		if e.after == nil {
			continue
		}
		keep := e.after(nc)
		if !keep {
			_ = nc.Close() // before the test hears of it
		}
		e.done <- struct{}{}
		if !keep {
			return
		}
	}
}

// pooledPeerGone reports whether the one pooled connection's hang-up
// watcher saw its engine hang up (seen), and whether a connection is
// pooled at all: put drops one whose hang-up the watcher saw first.
func pooledPeerGone(u *Client) (seen, pooled bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, ep := range u.eps {
		for _, pc := range ep.idle {
			return pc.sock.PeerGone(), true
		}
	}
	return false, false
}

// pooledTrusted reports whether the one pooled connection would be
// reused at now without a peek (alive, for a request that can be sent
// again). Where it would not be, alive has peeked at it.
func pooledTrusted(u *Client, now sockio.Mono) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, ep := range u.eps {
		for _, pc := range ep.idle {
			_, trusted := pc.alive(now, true)
			return trusted
		}
	}
	return false
}

// TestPooledConnCheckedBeforeReuse: a pooled connection the engine closed
// (right after its answer without saying so, or while idle) or sent bytes
// on after its answer is not reused: the next request gets its own answer
// on a new connection. Within peekAfter of the last exchange the hang-up
// watcher tells when it has seen the hang-up; when it has not yet, the
// request goes out on the closed connection, the engine's TCP acknowledges
// none of it and it is sent again. Past the window, or for a body that
// cannot be sent again (streamed, of unknown length), the peek tells. A
// connection the engine keeps is reused either way.
func TestPooledConnCheckedBeforeReuse(t *testing.T) {
	stray := func(nc net.Conn) bool {
		_, _ = io.WriteString(nc, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nSTRAY")
		return true
	}
	closeNow := func(net.Conn) bool { return false }
	for _, tc := range []struct {
		name         string
		after        func(net.Conn) bool
		late         bool // the second request comes past peekAfter
		waitWatcher  bool // wait until the watcher saw the hang-up
		wantAccepted int64
		body         string // "", "sized" or "chunked": a streamed body
	}{
		{"closed after the answer, before the watcher", closeNow, false, false, 2, ""},
		{"closed after the answer, before the watcher, sized stream", closeNow, false, false, 2, "sized"},
		{"closed after the answer, before the watcher, chunked stream", closeNow, false, false, 2, "chunked"},
		{"kept, at once", func(net.Conn) bool { return true }, false, false, 1, ""},
		{"kept, later", func(net.Conn) bool { return true }, true, false, 1, ""},
		{"closed after the answer, at once", func(net.Conn) bool { return false }, false, true, 2, ""},
		{"closed after the answer, later", func(net.Conn) bool { return false }, true, false, 2, ""},
		{"closed while idle, at once", func(net.Conn) bool { time.Sleep(20 * time.Millisecond); return false }, false, true, 2, ""},
		{"closed while idle, later", func(net.Conn) bool { time.Sleep(20 * time.Millisecond); return false }, true, false, 2, ""},
		{"reset while idle, at once", func(nc net.Conn) bool {
			_ = nc.(*net.TCPConn).SetLinger(0)
			return false
		}, false, true, 2, ""},
		{"bytes after the answer, later", func(nc net.Conn) bool {
			time.Sleep(20 * time.Millisecond)
			return stray(nc)
		}, true, false, 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := startAfterEngine(t, tc.after)
			u := New(time.Second, 4, nil)
			t.Cleanup(u.CloseIdle)
			leg := Leg{Endpoint: endpoint(e.ln.Addr().String()), Path: "/", Body: []byte("{}"), HeaderWait: 10 * time.Second}
			send := func(i int) string {
				switch tc.body {
				case "sized":
					leg.Stream = &BodyStream{R: strings.NewReader("{}"), N: 2}
				case "chunked":
					leg.Stream = &BodyStream{R: strings.NewReader("{}"), N: -1}
				}
				return sendText(t, u, leg, i)
			}
			first := time.Now()
			if got := send(1); got != "ok1" {
				t.Fatalf("first answer %q", got)
			}
			select {
			case <-e.done: // the engine did what it does after an answer
			case <-time.After(10 * time.Second):
				t.Fatal("the engine did not finish its script")
			}
			if tc.waitWatcher {
				// Seen while pooled, or already at put (an engine that
				// closes as it answers can beat the pooling).
				waitUntil(t, "the watcher to see the hang-up", func() bool {
					seen, pooled := pooledPeerGone(u)
					return seen || !pooled
				})
			}
			if tc.late {
				time.Sleep(time.Until(first.Add(peekAfter + 20*time.Millisecond)))
			}
			if got := send(2); got != "ok2" {
				t.Fatalf("second answer %q, want ok2 (an out-of-sync or closed connection reused)", got)
			}
			if n := e.accepted.Load(); n != tc.wantAccepted {
				t.Fatalf("the engine accepted %d connections, want %d", n, tc.wantAccepted)
			}
		})
	}
}

// TestBytesWithTheAnswerNotReused: bytes an engine sends in the same
// write as its answer are in the read buffer when the answer ends, so the
// connection is dropped even when the next request comes at once.
func TestBytesWithTheAnswerNotReused(t *testing.T) {
	var accepted atomic.Int64
	ln := serveEach(t, func(nc net.Conn) {
		defer nc.Close()
		n := accepted.Add(1)
		_ = nc.SetDeadline(time.Now().Add(20 * time.Second))
		br := bufio.NewReader(nc)
		for {
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			body := "ok" + strconv.FormatInt(n, 10)
			_, _ = io.WriteString(nc, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n"+body+
				"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nSTRAY")
		}
	})
	u := New(time.Second, 4, nil)
	t.Cleanup(u.CloseIdle)
	leg := Leg{Endpoint: endpoint(ln.Addr().String()), Path: "/", Body: []byte("{}")}
	for i := 1; i <= 2; i++ {
		resp, err := u.Send(t.Context(), leg)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := "ok" + strconv.Itoa(i); string(b) != want {
			t.Fatalf("request %d: answer %q, want %q", i, b, want)
		}
	}
}

// TestPooledHangUpSeenAfterAStream: a stream puts its engine socket in the
// client's stream watcher (hup) while it runs, and the same socket is in
// the pool's (pooledHup) from its first pooling on. An epoll set holds one
// registration per socket, so were the two one set the stream's would
// replace the pool's, and an engine closing the connection once idle
// again would go unseen (the next request would go out on it unpeeked).
func TestPooledHangUpSeenAfterAStream(t *testing.T) {
	long := strings.Repeat("x", 64<<10) // past the read buffer: Stream waits in ReadEach
	var accepted atomic.Int64
	closeIt := releaseGate(t)
	ln := serveEach(t, func(nc net.Conn) {
		defer nc.Close()
		accepted.Add(1)
		_ = nc.SetDeadline(time.Now().Add(20 * time.Second))
		br := bufio.NewReader(nc)
		for n := 1; n <= 2; n++ {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, req.Body)
			body := "ok1"
			if n == 2 {
				body = long
			}
			_, _ = io.WriteString(nc, "HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
		}
		<-closeIt // the second answer's connection is pooled again
	})
	u := New(time.Second, 4, nil)
	t.Cleanup(u.CloseIdle)
	leg := Leg{Endpoint: endpoint(ln.Addr().String()), Path: "/", Body: []byte("{}"), HeaderWait: 10 * time.Second}
	if got := sendText(t, u, leg, 1); got != "ok1" { // pooled: in pooledHup
		t.Fatalf("first answer %q", got)
	}
	resp, err := u.Send(t.Context(), leg)
	if err != nil {
		t.Fatalf("request 2: %v", err)
	}
	s := &collect{}
	ok, err := resp.Body.(Streamer).Stream(s) // in hup while it runs
	resp.Body.Close()
	if !ok {
		if rawStreamable() {
			t.Skip("no plaintext socket calls here")
		}
		t.Fatal("Stream refused a plaintext engine connection")
	}
	if err != nil || string(s.got) != long {
		t.Fatalf("second answer: %d bytes, %v; want %d", len(s.got), err, len(long))
	}
	if seen, pooled := pooledPeerGone(u); seen || !pooled {
		t.Fatalf("before the engine closed: seen %v, pooled %v; want a live pooled connection", seen, pooled)
	}
	close(closeIt)
	waitUntil(t, "the pool's watcher to see the engine close the idle connection", func() bool {
		seen, _ := pooledPeerGone(u)
		return seen
	})
	if n := accepted.Load(); n != 1 {
		t.Fatalf("the engine accepted %d connections, want 1 (both requests on one)", n)
	}
}
