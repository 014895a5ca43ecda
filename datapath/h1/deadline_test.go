package h1

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestLazyReadDeadlines checks the connection's read bounds as the lazy
// deadlines implement them: a bound asked for after a nearer one was armed
// (the idle wait after a body's ReadTimeout, a body read after the handler
// lifted the deadline) holds for its whole length, and the bound asked for
// last still ends the connection.
//
// Sleeps only ever run long, so each wait past a bound (2 × readTimeout)
// proves the bound passed however loaded the box is; what a stall can break
// is the other side, a wait that must end before IdleTimeout. So the idle
// bound is 20 × readTimeout: the client would have to stall 1.8 s between
// two lines to lose the connection legitimately (at 4 × it failed about
// once in 90 runs at load 20, where 150 ms stalls are common), and each
// failure says how long the wait really was.
func TestLazyReadDeadlines(t *testing.T) {
	const readTimeout, idle = 100 * time.Millisecond, 2 * time.Second
	s := &Server{ReadHeaderTimeout: 5 * time.Second, ReadTimeout: readTimeout, IdleTimeout: idle,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/lift" {
				_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
			}
			b, _ := io.ReadAll(r.Body)
			_, _ = w.Write(b)
		})}
	nc, err := net.Dial("tcp", serveOn(t, s))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	br := bufio.NewReader(nc)
	send := func(path, body string) {
		t.Helper()
		_, err := io.WriteString(nc, "POST "+path+" HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n"+body)
		if err != nil {
			t.Fatal(err)
		}
	}
	// since is when the wait before the request began: an answer lost
	// after more than idle is a stalled box, not the server's bug.
	answer := func(want string, since time.Time) {
		t.Helper()
		_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("answer: %v, %v after the wait began (IdleTimeout %v)", err, time.Since(since), idle)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(b) != want {
			t.Fatalf("answer %d %q, want 200 %q", resp.StatusCode, b, want)
		}
	}

	// A body under ReadTimeout arms its deadline; the idle wait that
	// follows is longer and must not end at the body's.
	sent := time.Now()
	send("/echo", "ab")
	answer("ab", sent)
	idleFrom := time.Now()
	time.Sleep(2 * readTimeout)
	// The handler lifts the deadline, then the body comes past ReadTimeout.
	_, _ = io.WriteString(nc, "POST /lift HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n")
	time.Sleep(2 * readTimeout)
	// The server arms the idle bound once it has answered this body, so
	// after start: its close cannot come sooner than idle after start.
	start := time.Now()
	_, _ = io.WriteString(nc, "cd")
	answer("cd", idleFrom)
	// Idle past IdleTimeout: the server closes the connection.
	_ = nc.SetReadDeadline(time.Now().Add(4 * idle))
	if n, err := br.Read(make([]byte, 1)); n != 0 || err == nil || strings.Contains(err.Error(), "timeout") {
		t.Fatalf("idle connection: read %d, %v; want the server's close", n, err)
	}
	if d := time.Since(start); d < idle-50*time.Millisecond {
		t.Fatalf("closed after %v idle, want %v", d, idle)
	}
}

// TestWriteDeadline checks that a write deadline set through
// http.ResponseController ends a response the client does not read: the
// socket's writes must not take it for an early lazy deadline and write on
// unbounded.
func TestWriteDeadline(t *testing.T) {
	const bound = 200 * time.Millisecond
	failed := make(chan error, 1)
	_, addr := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(bound))
		chunk := make([]byte, 64<<10)
		for range 4096 { // 256 MiB: far past what the socket buffers hold
			if _, err := w.Write(chunk); err != nil {
				failed <- err
				return
			}
		}
		failed <- nil
	}))
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := io.WriteString(nc, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// The client reads nothing.
	select {
	case err := <-failed:
		if err == nil {
			t.Fatal("the response was written in full to a client that reads nothing")
		}
	case <-time.After(10 * bound):
		t.Fatalf("a write still blocked %v after its %v deadline", 10*bound, bound)
	}
}

// TestBodyDeadline: a body's read deadline is ReadTimeout from the head's
// first read, unless the body is already whole in the read buffer (read
// without the socket) or there is no ReadTimeout.
func TestBodyDeadline(t *testing.T) {
	start := time.Unix(1000, 0)
	tests := []struct {
		name        string
		readTimeout time.Duration
		buffered    string // what the read buffer holds past the head
		n           int64  // Content-Length
		chunked     bool
		want        bool
	}{
		{"whole in the buffer", time.Second, "0123456789", 10, false, false},
		{"more than the body buffered", time.Second, "0123456789GET", 10, false, false},
		{"part in the buffer", time.Second, "01234", 10, false, true},
		{"none in the buffer", time.Second, "", 10, false, true},
		{"chunked", time.Second, "2\r\nab\r\n0\r\n\r\n", 0, true, true},
		{"no ReadTimeout", 0, "", 10, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &conn{srv: &Server{ReadTimeout: tc.readTimeout}, br: bufio.NewReader(strings.NewReader(tc.buffered))}
			_, _ = c.br.Peek(len(tc.buffered))
			rs := &reqState{start: start}
			rs.body = body{c: c, n: tc.n, chunked: tc.chunked}
			rs.whole = rs.body.buffered() // as readRequest sets it
			dl, ok := c.bodyDeadline(rs)
			if ok != tc.want || ok && !dl.Equal(start.Add(tc.readTimeout)) {
				t.Errorf("deadline %v, %v; want one: %v", dl, ok, tc.want)
			}
		})
	}
}
