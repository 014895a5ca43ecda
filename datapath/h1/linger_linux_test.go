//go:build linux

package h1

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// TestLingeringCloseShowsAnswer: a server that answers before reading a
// body (a refused head, a handler's early 413) and then closes with the
// rest of the body unread resets the connection: the client's upload fails
// and its reads report the reset, not the end of the answer. The lingering
// close half-closes and drains what the client still sends, so the client
// reads the whole answer, then the half-close (EOF), its upload completes,
// and the server closes its socket with nothing unread (asked of the
// kernel, FIONREAD, as it closes). Each case runs on a fresh connection
// and on one that served a request first (in the socket's read wait, with
// the hang-up watcher armed: its wake-up at the client's FIN once ended
// the drain with bytes unread).
//
// The body is 4 MiB (under the drain's 16 MiB; it once stopped at 1 MiB)
// and the client's send buffer small, so a drain cut short leaves more
// unread than the server's receive window takes and the upload fails.
// Cut to no drain, to 1 MiB or to 1 ms in conn.go, every case fails; with
// the watcher left on, the cases after a request fail most runs (the FIN
// must come while the drain still has bytes to read).
//
// The drain is bounded in time (lingerAfterRefusal): a client still
// sending when it ends is reset by design. An attempt whose upload failed,
// or whose server closed with bytes unread, at least lingerAfterRefusal
// after the request was sent (before the drain began) proves nothing and
// is run again, at most five times; sooner, the drain was cut short. (At
// load 33, 10 of 360 race-build attempts of a 12 MiB upload outlasted the
// bound, once three in a row.)
func TestLingeringCloseShowsAnswer(t *testing.T) {
	const bodySize, attempts = 4 << 20, 5
	addr, closes := startRecordingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			_, _ = io.WriteString(w, "ok")
			return
		}
		w.WriteHeader(http.StatusRequestEntityTooLarge) // the body is never read
		_, _ = io.WriteString(w, "too large")
	}))
	for _, tc := range []struct {
		name   string
		head   string
		body   int
		status int
		answer string
	}{
		{"handler answers before reading the body",
			"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: " + strconv.Itoa(bodySize) + "\r\n\r\n",
			bodySize, http.StatusRequestEntityTooLarge, "too large"},
		{"handler answers before reading a chunked body",
			"POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + strconv.FormatInt(bodySize, 16) + "\r\n",
			bodySize, http.StatusRequestEntityTooLarge, "too large"},
		{"refused head followed by its body",
			"POST /upload HTTP/1.1\r\nHost: x\r\nBad Header: x\r\nContent-Length: " + strconv.Itoa(bodySize) + "\r\n\r\n",
			bodySize, http.StatusBadRequest, "400 Bad Request: invalid header name"},
	} {
		for _, warm := range []bool{false, true} {
			name := tc.name
			if warm {
				name += ", after a request"
			}
			t.Run(name, func(t *testing.T) {
				for attempt := 1; ; attempt++ {
					res := lingerAttempt(t, addr, warm, tc.head, make([]byte, tc.body), closes)
					if res.readErr != nil {
						t.Fatalf("reading the answer: %v (after %d bytes of the upload were written)", res.readErr, res.written)
					}
					if res.status != tc.status || res.answer != tc.answer {
						t.Fatalf("answer %d %q, want %d %q", res.status, res.answer, tc.status, tc.answer)
					}
					if !errors.Is(res.afterErr, io.EOF) {
						t.Fatalf("after the answer: %v, want EOF (the server's half-close); a reset means it closed with the body unread", res.afterErr)
					}
					if res.unread < 0 {
						t.Fatal("FIONREAD on the server's socket failed")
					}
					if res.writeErr != nil && res.writeAfter < lingerAfterRefusal {
						t.Fatalf("the upload was cut after %d of %d bytes, %v after the request was sent: the drain ended before its %v bound (%v)",
							res.written, tc.body, res.writeAfter, lingerAfterRefusal, res.writeErr)
					}
					if res.unread > 0 && res.closeAfter < lingerAfterRefusal {
						t.Fatalf("the server closed with %d bytes unread, %v after the request was sent: the drain ended before its %v bound",
							res.unread, res.closeAfter, lingerAfterRefusal)
					}
					if res.writeErr == nil && res.unread == 0 {
						return
					}
					if attempt == attempts {
						t.Fatalf("%d uploads each outlasted the %v drain (last: upload %v, %d of %d bytes; close %v, %d unread): the box stalls too long to tell",
							attempts, lingerAfterRefusal, res.writeAfter, res.written, tc.body, res.closeAfter, res.unread)
					}
					t.Logf("attempt %d: the upload outlasted the drain's bound (upload %v, %d of %d bytes; close %v, %d unread); again",
						attempt, res.writeAfter, res.written, tc.body, res.closeAfter, res.unread)
				}
			})
		}
	}
}

// serverClose is what the server's socket held unread when it was closed.
type serverClose struct {
	unread int
	at     time.Time
}

// startRecordingServer serves h on a loopback port until the test ends and
// reports each connection's close on the returned channel.
func startRecordingServer(t *testing.T, h http.Handler) (string, <-chan serverClose) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closes := make(chan serverClose, 16)
	s := &Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(recordingListener{l, closes}) }()
	t.Cleanup(func() { _ = s.Close(); <-done })
	return l.Addr().String(), closes
}

// recordingListener hands the server connections that report what their
// socket held unread when closed. They expose the TCP connection through
// NetConn, so the server reads and writes its socket as it would anyway.
type recordingListener struct {
	net.Listener
	closes chan<- serverClose
}

func (l recordingListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &recordingConn{TCPConn: nc.(*net.TCPConn), closes: l.closes}, nil
}

type recordingConn struct {
	*net.TCPConn
	closes chan<- serverClose
}

func (c *recordingConn) NetConn() net.Conn { return c.TCPConn }

func (c *recordingConn) Close() error {
	rec := serverClose{unread: -1, at: time.Now()}
	if rc, err := c.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) {
			var n int32
			if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&n))); errno == 0 {
				rec.unread = int(n)
			}
		})
	}
	select {
	case c.closes <- rec:
	default: // nobody is asking (the server's own Close at the end)
	}
	return c.TCPConn.Close()
}

// lingerResult is what one upload to a server that does not read it saw.
type lingerResult struct {
	status     int
	answer     string
	readErr    error         // reading the answer
	afterErr   error         // the read after the answer
	written    int           // body bytes the upload wrote
	writeErr   error         // the upload's failure, if it failed
	writeAfter time.Duration // from sending the request to that failure
	unread     int           // bytes the server's socket held unread at its close
	closeAfter time.Duration // from sending the request to the server's close
}

// lingerAttempt sends a GET first when warm, then head, then body from
// another goroutine (the server answers before reading it); it reads the
// answer and the read after it, half-closes once the body is written (so
// the server's drain ends) and waits for the server's close.
func lingerAttempt(t *testing.T, addr string, warm bool, head string, body []byte, closes <-chan serverClose) lingerResult {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// The deadlines only bound a broken server's hang; no outcome depends
	// on them.
	_ = nc.SetDeadline(time.Now().Add(20 * time.Second))
	// A fixed send buffer (no autotuning) keeps the unread rest of the
	// body out of the client's kernel, where it would hide a reset.
	if err := nc.(*net.TCPConn).SetWriteBuffer(64 << 10); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	if warm {
		if _, err := io.WriteString(nc, "GET /warm HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatalf("warm-up request: %v", err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("warm-up answer: %v", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
	}
	var res lingerResult
	sent := time.Now()
	if _, err := io.WriteString(nc, head); err != nil {
		t.Fatalf("writing the head: %v", err)
	}
	uploaded := make(chan struct{})
	go func() {
		defer close(uploaded)
		for res.written < len(body) {
			n, err := nc.Write(body[res.written:min(len(body), res.written+64<<10)])
			res.written += n
			if err != nil {
				res.writeErr, res.writeAfter = err, time.Since(sent)
				return
			}
		}
		_ = nc.(*net.TCPConn).CloseWrite()
	}()
	resp, err := http.ReadResponse(br, nil)
	if err == nil {
		var b []byte
		b, err = io.ReadAll(resp.Body)
		res.status, res.answer = resp.StatusCode, string(b)
	}
	res.readErr = err
	if err == nil {
		_, res.afterErr = br.Read(make([]byte, 1))
	}
	<-uploaded
	select {
	case c := <-closes:
		res.unread, res.closeAfter = c.unread, c.at.Sub(sent)
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not close the connection within 10 s of the upload's end")
	}
	return res
}
