package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/fakeengine"
)

// TestFramer walks each message whole and one byte at a time: both must
// end it at the same byte, or fail alike.
func TestFramer(t *testing.T) {
	const next = "GET /next HTTP/1.1\r\n\r\n"
	tests := []struct {
		name     string
		response bool
		noBody   bool
		msg      string // one message; next follows it in the stream
		err      bool
	}{
		{name: "request without body", msg: "GET / HTTP/1.1\r\nHost: a\r\n\r\n"},
		{name: "request with length", msg: "POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"},
		{name: "request chunked", msg: "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n0\r\nT: 1\r\n\r\n"},
		{name: "header names any case", msg: "POST / HTTP/1.1\r\ncontent-length:  3 \r\n\r\nabc"},
		{name: "equal lengths twice", msg: "POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nab"},
		{name: "length and chunked", msg: "POST / HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n", err: true},
		{name: "two lengths", msg: "POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n", err: true},
		{name: "signed length", msg: "POST / HTTP/1.1\r\nContent-Length: +2\r\n\r\n", err: true},
		{name: "gzip coding", msg: "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", err: true},
		{name: "bad chunk size", msg: "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", err: true},
		{name: "chunk without CRLF", msg: "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\naXY", err: true},
		{name: "field without colon", msg: "GET / HTTP/1.1\r\nbad\r\n\r\n", err: true},
		{name: "response with length", response: true, msg: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"},
		{name: "response chunked", response: true, msg: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\ndat\r\nA\r\n0123456789\r\n0\r\n\r\n"},
		{name: "interim then final", response: true, msg: "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx"},
		{name: "no content", response: true, msg: "HTTP/1.1 204 No Content\r\n\r\n"},
		{name: "not modified with length", response: true, msg: "HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n"},
		{name: "answer to HEAD", response: true, noBody: true, msg: "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n"},
		{name: "body to the close", response: true, msg: "HTTP/1.1 200 OK\r\n\r\n", err: true},
		{name: "bad status line", response: true, msg: "HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n", err: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stream := []byte(tc.msg + next)
			whole := framer{response: tc.response, noBody: tc.noBody}
			n, done, err := whole.advance(stream)
			if tc.err {
				if err == nil {
					t.Fatalf("whole: took %d bytes, done %v; want an error", n, done)
				}
			} else if err != nil || !done || n != len(tc.msg) {
				t.Fatalf("whole: n %d done %v err %v; want %d, done", n, done, err, len(tc.msg))
			}
			// The same bytes as reads of one byte, through a pipe: the
			// message must end as its last byte arrives, and be walked whole.
			q := newPipe(256, tc.response)
			q.f.noBody = tc.noBody
			walked := 0
			for i, b := range stream {
				sp, err := q.space()
				if err != nil {
					t.Fatal(err)
				}
				sp[0] = b
				q.filled(1)
				done, err := q.walk()
				if err != nil {
					if !tc.err {
						t.Fatalf("bytewise: %v", err)
					}
					return
				}
				walked += len(q.out())
				q.wrote(len(q.out()))
				if done {
					if tc.err {
						t.Fatal("bytewise: done; want an error")
					}
					if i+1 != len(tc.msg) || walked != len(tc.msg) {
						t.Fatalf("bytewise: done after %d bytes read, %d walked; want %d", i+1, walked, len(tc.msg))
					}
					return
				}
			}
			t.Fatal("bytewise: the message never ended")
		})
	}
}

// TestPipeTooLong: a head that fills the whole buffer is refused, not
// waited on.
func TestPipeTooLong(t *testing.T) {
	q := newPipe(1024, false)
	sp, _ := q.space()
	copy(sp, "GET / HTTP/1.1\r\nX: "+strings.Repeat("a", 2000))
	q.filled(len(sp))
	if done, err := q.walk(); done || err != nil {
		t.Fatalf("walk: done %v err %v", done, err)
	}
	if _, err := q.space(); !errors.Is(err, errTooLong) {
		t.Fatalf("space: %v; want errTooLong", err)
	}
}

// TestAnswered: the keep-alive rule every design applies once an answer
// has ended.
func TestAnswered(t *testing.T) {
	tests := []struct {
		name      string
		req, resp string // the exchange, walked whole
		stray     string // engine bytes past the answer
		wantClose bool
		wantErr   error
	}{
		{name: "kept alive", req: "GET / HTTP/1.1\r\n\r\n", resp: "HTTP/1.1 204 No Content\r\n\r\n"},
		{name: "engine closes", req: "GET / HTTP/1.1\r\n\r\n", resp: "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n", wantClose: true},
		{name: "client closes", req: "GET / HTTP/1.1\r\nConnection: close\r\n\r\n", resp: "HTTP/1.1 204 No Content\r\n\r\n", wantErr: errClosed},
		{name: "both close", req: "GET / HTTP/1.1\r\nConnection: close\r\n\r\n", resp: "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n", wantClose: true, wantErr: errClosed},
		{name: "stray engine bytes", req: "GET / HTTP/1.1\r\n\r\n", resp: "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n", stray: "x", wantErr: errTrailing},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, resp := newPipe(256, false), newPipe(256, true)
			for _, x := range []struct {
				q *pipe
				b string
			}{{req, tc.req}, {resp, tc.resp + tc.stray}} {
				sp, _ := x.q.space()
				x.q.filled(copy(sp, x.b))
				if done, err := x.q.walk(); !done || err != nil {
					t.Fatalf("walk %q: done %v err %v", x.b, done, err)
				}
				x.q.wrote(len(x.q.out()))
			}
			closeEngine, err := answered(req, resp)
			if closeEngine != tc.wantClose || !errors.Is(err, tc.wantErr) {
				t.Fatalf("answered: close engine %v, err %v; want %v, %v", closeEngine, err, tc.wantClose, tc.wantErr)
			}
			if err == nil && (req.f.st != inHead || req.f.close) {
				t.Fatalf("the request framer was not readied for the next request: %+v", req.f)
			}
		})
	}
}

// TestProxySmoke runs each design briefly on loopback in front of the
// fake engine: plain and streamed completions, a chunked request body, a
// HEAD, on one kept-alive client connection, then two pipelined requests;
// what the client gets must be what the engine sent, byte for byte.
func TestProxySmoke(t *testing.T) {
	eng, err := fakeengine.Start(fakeengine.Options{Name: "floor"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	modes := []string{"goroutine-net"}
	if runtime.GOOS == "linux" { // the raw socket calls and epoll
		modes = append(modes, "goroutine", "loop", "loop-block")
	}
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			o := DefaultOptions()
			o.Mode, o.Engine, o.Loops, o.BufLen = mode, eng.Addr(), 2, 4096
			addr := startProxy(t, o)
			checkExchanges(t, eng, addr)
			checkPipelined(t, addr)
		})
	}
}

// startProxy runs the proxy until the test ends.
func startProxy(t *testing.T, o Options) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrs, errs := make(chan string, 1), make(chan error, 1)
	go func() { errs <- Run(ctx, o, func(a string) { addrs <- a }) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-errs:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("the proxy did not stop within 5 s")
		}
	})
	select {
	case a := <-addrs:
		return a
	case err := <-errs:
		t.Fatalf("run: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("the proxy did not listen within 5 s")
	}
	return ""
}

func checkExchanges(t *testing.T, eng *fakeengine.Server, addr string) {
	direct, proxied := client(), client()
	defer direct.CloseIdleConnections()
	defer proxied.CloseIdleConnections()
	const prompt = `{"model":"fake-model","prompt":"hello","max_tokens":4}`
	const stream = `{"model":"fake-model","prompt":"hello","stream":true}`
	tests := []struct {
		name, method, path, body string
		chunked                  bool
	}{
		{"plain", http.MethodPost, "/v1/completions", prompt, false},
		{"streamed answer", http.MethodPost, "/v1/completions", stream, false},
		{"chunked request", http.MethodPost, "/v1/completions", prompt, true},
		{"head", http.MethodHead, "/v1/models", "", false},
		{"after head", http.MethodPost, "/v1/completions", prompt, false},
	}
	reused := 0
	for _, tc := range tests {
		want, _ := exchange(t, direct, "http://"+eng.Addr(), tc.method, tc.path, tc.body, tc.chunked)
		got, re := exchange(t, proxied, "http://"+addr, tc.method, tc.path, tc.body, tc.chunked)
		if re {
			reused++
		}
		if tc.name == "streamed answer" {
			// Each event carries the time it was made; compare their count.
			if w, g := strings.Count(want, "data: "), strings.Count(got, "data: "); w < 2 || g != w || !strings.HasSuffix(got, "data: [DONE]\n\n") {
				t.Errorf("%s: %d events proxied, %d direct; proxied answer %q", tc.name, g, w, got)
			}
			continue
		}
		if got != want {
			t.Errorf("%s: proxied answer %q; direct %q", tc.name, got, want)
		}
	}
	if reused != len(tests)-1 {
		t.Errorf("%d of %d requests on a kept-alive connection; want all but the first", reused, len(tests))
	}
	reqs := eng.Requests()
	if len(reqs) == 0 || string(reqs[len(reqs)-1].Body) != prompt {
		t.Errorf("the engine's last request was not the client's body")
	}
}

func client() *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxConnsPerHost: 1, DisableCompression: true}}
}

// exchange sends one request and returns "status headers-that-frame body"
// and whether it went on a reused connection.
func exchange(t *testing.T, c *http.Client, base, method, path, body string, chunked bool) (string, bool) {
	t.Helper()
	var rd io.Reader = strings.NewReader(body)
	if chunked {
		rd = io.MultiReader(rd) // no length known: the client sends it chunked
	}
	if body == "" {
		rd = nil
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	reused := false
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused },
	}))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: body: %v", method, path, err)
	}
	return resp.Status + " " + resp.Header.Get("Content-Length") + " " + string(b), reused
}

// checkPipelined sends two requests in one write: both answers come back,
// in order, on the one connection.
func checkPipelined(t *testing.T, addr string) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	const req = "POST /v1/completions HTTP/1.1\r\nHost: e\r\nContent-Length: 2\r\n\r\n{}"
	if _, err := io.WriteString(c, req+req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for i := range 2 {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("pipelined answer %d: %v", i, err)
		}
		_, err = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("pipelined answer %d: status %d, body %v", i, resp.StatusCode, err)
		}
	}
}
