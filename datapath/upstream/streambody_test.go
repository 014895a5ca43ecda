package upstream

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestStreamedBodyAnswered: a streamed body's last flush waits in the
// poll for the engine's answer (flushAwait) only when nothing of the
// request went out before it. An engine that answers on the head, before
// a long body has ended, has its answer in before that flush: the flush
// must not wait for a readiness that already came (it would sit until
// HeaderWait). Small bodies, sized and chunked, are answered after their
// end as usual. (On TCP the ACK of the last flush also reports the socket
// readable, so a wrong wait may end early here anyway; sockio's
// TestAwaitReplyAfterEarlierWrite checks the rule itself.)
func TestStreamedBodyAnswered(t *testing.T) {
	long := strings.Repeat("x", 3*bufSize) // past the request writer: flushed before it ends
	for _, tc := range []struct {
		name  string
		body  string
		n     int64 // BodyStream.N
		early bool  // the engine answers once it has the head
	}{
		{"small, sized", `{"prompt":"hi"}`, 15, false},
		{"small, chunked", `{"prompt":"hi"}`, -1, false},
		{"long, sized, answered after its end", long, int64(len(long)), false},
		{"long, sized, answered on the head", long, int64(len(long)), true},
		{"long, chunked, answered on the head", long, -1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = ln.Close() })
			answered := make(chan struct{})
			engineErr := make(chan error, 1)
			go func() {
				nc, err := ln.Accept()
				if err != nil {
					engineErr <- err
					return
				}
				defer nc.Close()
				_ = nc.SetDeadline(time.Now().Add(20 * time.Second))
				req, err := http.ReadRequest(bufio.NewReader(nc))
				if err != nil {
					engineErr <- err
					return
				}
				const answer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
				if tc.early {
					_, _ = io.WriteString(nc, answer)
					close(answered)
				}
				b, err := io.ReadAll(req.Body)
				if err == nil && string(b) != tc.body {
					err = io.ErrUnexpectedEOF
				}
				if !tc.early {
					_, _ = io.WriteString(nc, answer)
				}
				engineErr <- err
			}()
			// The client's body: the first part, then (early) the rest only
			// once the engine has answered.
			pr, pw := io.Pipe()
			go func() {
				cut := min(len(tc.body), 2*bufSize)
				_, _ = io.WriteString(pw, tc.body[:cut])
				if tc.early {
					<-answered
				}
				_, _ = io.WriteString(pw, tc.body[cut:])
				_ = pw.Close()
			}()
			u := New(time.Second, 4, nil)
			t.Cleanup(u.CloseIdle)
			leg := Leg{Endpoint: endpoint(ln.Addr().String()), Path: "/v1/audio",
				Stream: &BodyStream{R: pr, N: tc.n}, HeaderWait: 10 * time.Second}
			if got := sendText(t, u, leg, 1); got != "ok" {
				t.Fatalf("answer %q, want \"ok\"", got)
			}
			if err := <-engineErr; err != nil {
				t.Fatalf("engine: %v", err)
			}
		})
	}
}

// TestStreamedBodyHeaderWaitFromItsEnd: HeaderWait bounds the engine's
// silence from the streamed body's end, not from Send: a client whose body
// takes longer than HeaderWait still gets the engine's prompt answer.
func TestStreamedBodyHeaderWaitFromItsEnd(t *testing.T) {
	const headerWait = time.Second
	ln := serveEach(t, func(nc net.Conn) {
		defer nc.Close()
		_ = nc.SetDeadline(time.Now().Add(20 * time.Second))
		req, err := http.ReadRequest(bufio.NewReader(nc))
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		_, _ = io.WriteString(nc, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	})
	pr, pw := io.Pipe()
	go func() {
		_, _ = io.WriteString(pw, `{"prompt":`)
		time.Sleep(headerWait * 3 / 2) // the client is slow: past HeaderWait from Send
		_, _ = io.WriteString(pw, `"hi"}`)
		_ = pw.Close()
	}()
	u := New(time.Second, 4, nil)
	t.Cleanup(u.CloseIdle)
	leg := Leg{Endpoint: endpoint(ln.Addr().String()), Path: "/v1/completions",
		Stream: &BodyStream{R: pr, N: -1, Idle: 10 * time.Second}, HeaderWait: headerWait}
	if got := sendText(t, u, leg, 1); got != "ok" {
		t.Fatalf("answer %q, want \"ok\"", got)
	}
}

// emptyReads returns its body, then (0, nil) for good: a reader that
// never reports the end.
type emptyReads struct{ body string }

func (r *emptyReads) Read(p []byte) (int, error) {
	n := copy(p, r.body)
	r.body = r.body[n:]
	return n, nil
}

// TestBodyStreamWhole: a streamed body that prime's read brought whole
// goes out as a buffered one; one whose reader has more past its length,
// never ends, or is over the limit fails as the client's; the rest stay
// streamed.
func TestBodyStreamWhole(t *testing.T) {
	for _, tc := range []struct {
		name      string
		r         io.Reader
		n, max    int64
		wantWhole bool
		wantErr   string // "" none, "client", "too large"
	}{
		{"sized, whole", strings.NewReader("{}"), 2, 0, true, ""},
		{"sized, in pieces", io.MultiReader(strings.NewReader("{"), strings.NewReader("}")), 2, 0, false, ""},
		{"chunked", strings.NewReader("{}"), -1, 0, false, ""},
		{"longer than its length", io.MultiReader(strings.NewReader("{}"), strings.NewReader("x")), 2, 0, false, "client"},
		{"never ends", &emptyReads{body: "{}"}, 2, 0, false, "client"},
		{"over the limit", strings.NewReader("{}"), 2, 1, false, "too large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &BodyStream{R: tc.r, N: tc.n, Max: tc.max}
			if err := s.prime(); err != nil {
				t.Fatalf("prime: %v", err)
			}
			defer s.releaseHead()
			b, whole, err := s.whole()
			var cbe *ClientBodyError
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("whole: %v", err)
			case tc.wantErr != "" && !errors.As(err, &cbe):
				t.Fatalf("whole: %v, want a *ClientBodyError", err)
			case tc.wantErr != "" && cbe.TooLarge != (tc.wantErr == "too large"):
				t.Fatalf("whole: %v (TooLarge %v), want %s", err, cbe.TooLarge, tc.wantErr)
			}
			if whole != tc.wantWhole || whole && string(b) != "{}" {
				t.Fatalf("whole %v, body %q; want %v", whole, b, tc.wantWhole)
			}
			if whole && s.Sent() != tc.n {
				t.Fatalf("Sent %d, want %d", s.Sent(), tc.n)
			}
		})
	}
}

// TestPrimeBufClass: a body whose Content-Length fits primeSmall is
// primed into the small buffer and still found whole at the class's edge;
// a longer one, or one of unknown length, gets primeChunk.
func TestPrimeBufClass(t *testing.T) {
	for _, tc := range []struct {
		name    string
		size, n int64 // bytes sent, Content-Length (-1 chunked)
		wantCap int
	}{
		{"empty", 0, 0, primeSmall},
		{"short", 71, 71, primeSmall},
		{"at the edge", primeSmall, primeSmall, primeSmall},
		{"past the edge", primeSmall + 1, primeSmall + 1, primeChunk},
		{"chunked, short", 71, -1, primeChunk},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := strings.Repeat("x", int(tc.size))
			s := &BodyStream{R: strings.NewReader(body), N: tc.n}
			if err := s.prime(); err != nil {
				t.Fatalf("prime: %v", err)
			}
			if got := cap(*s.headBuf); got != tc.wantCap {
				t.Fatalf("prime buffer of %d bytes, want %d", got, tc.wantCap)
			}
			b, whole, err := s.whole()
			if err != nil {
				t.Fatalf("whole: %v", err)
			}
			if wantWhole := tc.n >= 0; whole != wantWhole || whole && string(b) != body {
				t.Fatalf("whole %v (%d bytes); want %v", whole, len(b), wantWhole)
			}
			s.releaseHead()
			if s.headBuf != nil {
				t.Fatal("the prime buffer is still held after releaseHead")
			}
		})
	}
}
