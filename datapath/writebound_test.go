package datapath

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/infergate/infergate/spec"
)

// TestStalledClientEndsAtBodyStall: a client that keeps its connection
// open but reads nothing must not hold a streamed body that is not SSE
// (and with it the engine's connection and a relay buffer) past the body
// stall bound: the relay is blocked in a client write then, where the
// bound, a read deadline on the engine, never fires.
func TestStalledClientEndsAtBodyStall(t *testing.T) {
	const chunk = 1000
	for _, tc := range []struct {
		name, head, piece string
	}{
		{"chunked", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n", sseChunk(strings.Repeat("x", chunk))},
		{"content-length", "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: " +
			strconv.Itoa(floodPieces*chunk) + "\r\n\r\n", strings.Repeat("x", chunk)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions()
			o.BodyStallTimeout = 300 * time.Millisecond
			rt, _ := newTestRuntime(t, o)
			e, engineDone := startFloodingEngine(t, tc.head, tc.piece)
			r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.addr, 1))
			if err := rt.Install(nil, r); err != nil {
				t.Fatal(err)
			}
			sendStalled(t, ruleURL(r), sseRequest("/v1/completions", "{}"))
			waitEngineDone(t, engineDone, 15*time.Second, "body stall bound 300ms")
		})
	}
}

// floodPieces bounds a flooding engine's answer: 100 MB of 1 KB pieces.
const floodPieces = 100_000

// startFloodingEngine answers every request with head, then piece over and
// over (floodPieces times at most) until a write fails; done is closed when
// its answer ends, which a gateway that gave up on the client causes.
func startFloodingEngine(t *testing.T, head, piece string) (e *rawEngine, done <-chan struct{}) {
	t.Helper()
	ended := make(chan struct{})
	e = startRawEngine(t, func(nc net.Conn) bool {
		defer close(ended)
		_, _ = io.WriteString(nc, head)
		for range floodPieces {
			_ = nc.SetWriteDeadline(time.Now().Add(30 * time.Second))
			if _, err := io.WriteString(nc, piece); err != nil {
				return false
			}
		}
		return false
	})
	return e, ended
}

// sendStalled sends req to the rule at url from a client that keeps its
// connection open (until the test ends) and reads nothing, its receive
// buffer small: the gateway's writes to it soon block.
func sendStalled(t *testing.T, url, req string) {
	t.Helper()
	cl, err := net.Dial("tcp", url[len("http://"):])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	_ = cl.(*net.TCPConn).SetReadBuffer(4 << 10)
	if _, err := io.WriteString(cl, req); err != nil {
		t.Fatal(err)
	}
}

// waitEngineDone fails the test unless done closes within d; bound names
// the bound that should have closed it.
func waitEngineDone(t *testing.T, done <-chan struct{}, d time.Duration, bound string) {
	t.Helper()
	start := time.Now()
	select {
	case <-done:
		t.Logf("the engine's connection ended %v after the request (%s)", time.Since(start), bound)
	case <-time.After(d):
		t.Fatalf("a client that reads nothing held the answer %v past its bound (%s)", d, bound)
	}
}

// refusedPath is a path outside the rules' allowed_paths in the write
// bound tests: the gateway answers it itself, setting no write bound.
const refusedPath = "/refused"

// writeBoundLeftBehind sends first on one keep-alive connection to addr
// and reads its answer, waits past wait (the first answer's write bound),
// then pipelines n requests the gateway refuses itself, reading nothing
// for a while so its writes block, and returns how many answers came back.
// A write bound the first answer left on the connection fails the first
// blocked write (the lean front end consults a deadline only then), so
// fewer than n come back.
func writeBoundLeftBehind(t *testing.T, addr, first string, wait time.Duration, n int) int {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		// A small receive window before the handshake: the gateway's
		// writes block after a few answers.
		return rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<10) })
	}}
	cl, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	_ = cl.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(cl)
	if _, err := io.WriteString(cl, first); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK || res.Close {
		t.Fatalf("first answer: %d close=%v %q %v", res.StatusCode, res.Close, body, err)
	}
	time.Sleep(wait)
	req := "POST " + refusedPath + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
	wrote := make(chan error, 1)
	go func() {
		w := bufio.NewWriterSize(cl, 64<<10)
		for range n {
			if _, err := io.WriteString(w, req); err != nil {
				wrote <- err
				return
			}
		}
		wrote <- w.Flush()
	}()
	time.Sleep(300 * time.Millisecond) // the gateway's writes fill the sockets and block
	got := 0
	for ; got < n; got++ {
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Logf("answer %d: %v", got, err)
			break
		}
		if _, err := io.Copy(io.Discard, res.Body); err != nil || res.StatusCode != http.StatusNotFound {
			t.Logf("answer %d: %d %v", got, res.StatusCode, err)
			break
		}
	}
	_ = cl.Close()
	<-wrote
	return got
}

// sseRequest is a streamed completion request as a raw client sends it.
func sseRequest(path, body string) string {
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, len(body), body)
}
