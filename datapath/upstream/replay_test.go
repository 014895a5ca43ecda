package upstream

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/infergate/infergate/datapath/sockio"
)

// TestReadRequestNotSentAgain: an engine that reads a request whole and
// then resets the connection (an abortive close: a crash, or SO_LINGER 0
// on an error path) may have acted on it; its reset acknowledges nothing,
// and its TCP may not have acknowledged the request yet (a delayed ACK,
// usual once a connection has had an exchange). Such a request must fail,
// not go out a second time, even on a connection reused without a peek.
func TestReadRequestNotSentAgain(t *testing.T) {
	var got atomic.Int64 // requests the engine read whole
	ln := serveEach(t, func(nc net.Conn) {
		defer nc.Close()
		_ = nc.SetDeadline(time.Now().Add(20 * time.Second))
		br := bufio.NewReader(nc)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, req.Body)
			if n := got.Add(1); n == 2 {
				_ = nc.(*net.TCPConn).SetLinger(0)
				return // the second request was read: reset, no answer
			}
			body := "ok" + strconv.FormatInt(got.Load(), 10)
			_, _ = io.WriteString(nc, "HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
		}
	})
	u := New(time.Second, 4, nil)
	t.Cleanup(u.CloseIdle)
	leg := Leg{Endpoint: endpoint(ln.Addr().String()), Method: http.MethodPost, Path: "/v1/completions", Body: []byte(`{"prompt":"x"}`), HeaderWait: 10 * time.Second}
	if got := sendText(t, u, leg, 1); got != "ok1" {
		t.Fatalf("first answer %q, want ok1", got)
	}
	resp, err := u.Send(t.Context(), leg) // at once: within peekAfter
	if err == nil {
		_, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if n := got.Load(); n != 2 {
		t.Fatalf("the engine read %d requests, want 2 (the second was sent again after the engine read it)", n)
	}
	if err == nil {
		t.Fatal("the second request succeeded: it was sent again after the engine read it")
	}
}

// TestResetBeforeWriteSentAgain: an engine that resets a pooled connection
// right after its answer (SO_LINGER 0) may beat the hang-up watcher to the
// next request on it. When the reset is in before the request is, the
// write takes no byte of it: nothing reached the engine, and the request
// goes out again on another connection. (The watcher is taken off the
// connection once it has seen the reset, to stand for the moment before
// it reports. The engine resets only once the connection is pooled: one
// reset as the answer goes out can be seen at put, which drops the
// connection, and no request would go out on it.)
func TestResetBeforeWriteSentAgain(t *testing.T) {
	pooled := releaseGate(t)
	e := startAfterEngine(t, func(nc net.Conn) bool {
		<-pooled
		_ = nc.(*net.TCPConn).SetLinger(0)
		return false
	})
	u := New(time.Second, 4, nil)
	t.Cleanup(u.CloseIdle)
	leg := Leg{Endpoint: endpoint(e.ln.Addr().String()), Path: "/", Body: []byte("{}"), HeaderWait: 10 * time.Second}
	first := time.Now()
	if got := sendText(t, u, leg, 1); got != "ok1" {
		t.Fatalf("first answer %q", got)
	}
	close(pooled) // sendText has closed the body: the connection is pooled
	<-e.done
	waitUntil(t, "the watcher to see the reset", func() bool {
		seen, _ := pooledPeerGone(u)
		return seen
	})
	u.mu.Lock()
	for _, ep := range u.eps {
		for _, pc := range ep.idle {
			pc.sock.StopWatchingPeer() // PeerGone false from here: not seen yet
		}
	}
	u.mu.Unlock()
	now := time.Now()
	trusted := pooledTrusted(u, sockio.MonoOf(now))
	if now.Sub(first) >= peekAfter {
		t.Skip("the box was too slow to reach the request within peekAfter: the peek path ran")
	}
	if !trusted {
		t.Fatal("the pooled connection would be peeked before reuse: the resend under test would not run")
	}
	if got := sendText(t, u, leg, 2); got != "ok2" {
		t.Fatalf("second answer %q, want ok2", got)
	}
}

// sendText sends leg on u and returns the engine's answer body; request
// i names it in a failure.
func sendText(t *testing.T, u *Client, leg Leg, i int) string {
	t.Helper()
	resp, err := u.Send(t.Context(), leg)
	if err != nil {
		t.Fatalf("request %d: %v", i, err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("request %d: body: %v", i, err)
	}
	return string(b)
}

// TestClosedBefore: the errors that let a request reused without a peek
// go out again (with none of it acknowledged) are the engine's FIN, read
// as the end of stream, and EPIPE on a write after it; not a reset alone,
// a timeout or a cancelled context.
func TestClosedBefore(t *testing.T) {
	opErr := func(op string, errno syscall.Errno) error {
		return &net.OpError{Op: op, Net: "tcp", Err: os.NewSyscallError(op, errno)}
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"EOF", io.EOF, true},
		{"EOF in a head", io.ErrUnexpectedEOF, true},
		{"EOF, wrapped", fmt.Errorf("reading response from x: %w", io.EOF), true},
		{"EPIPE", opErr("write", syscall.EPIPE), true},
		{"ECONNRESET on a read", opErr("read", syscall.ECONNRESET), false},
		{"ECONNRESET on a write", opErr("write", syscall.ECONNRESET), false},
		{"timeout", os.ErrDeadlineExceeded, false},
		{"cancelled", context.Canceled, false},
	} {
		if got := closedBefore(tc.err); got != tc.want {
			t.Errorf("%s: closedBefore(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
