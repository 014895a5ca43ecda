package h1

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// gatedNetHTTP starts net/http's server behind GateListener on loopback;
// its handler records "METHOD path body" for each request it runs.
func gatedNetHTTP(t *testing.T, handle func(w http.ResponseWriter, r *http.Request)) (string, func() []string) {
	t.Helper()
	return gatedNetHTTPTimeout(t, 5*time.Second, handle)
}

// gatedNetHTTPTimeout is gatedNetHTTP with the server's (and the gate's)
// ReadHeaderTimeout set to hdr, and no idle or read timeout.
func gatedNetHTTPTimeout(t *testing.T, hdr time.Duration, handle func(w http.ResponseWriter, r *http.Request)) (string, func() []string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path+" "+string(b))
		mu.Unlock()
		if handle != nil {
			handle(w, r)
		}
	}), ReadHeaderTimeout: hdr}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(GateListener(l, hdr)) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	return l.Addr().String(), func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

// exchangeRaw writes each part (pausing between them) and returns the
// status codes answered before the server closed or went quiet.
func exchangeRaw(t *testing.T, addr string, parts ...string) []int {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i, p := range parts {
		if i > 0 {
			time.Sleep(50 * time.Millisecond)
		}
		if _, err := io.WriteString(c, p); err != nil {
			break
		}
	}
	br := bufio.NewReader(c)
	var codes []int
	for {
		_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return codes
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		codes = append(codes, resp.StatusCode)
	}
}

func TestGateListener(t *testing.T) {
	const second = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
	tests := []struct {
		name  string
		parts []string
		codes string // the answers' status codes
		seen  string // what the handler ran, "|"-joined
	}{
		{"length body then pipelined", []string{"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}GET /b HTTP/1.1\r\nHost: x\r\n\r\n"}, "[200 200]", "POST /a {}|GET /b "},
		{"chunked with extension and trailer", []string{"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2;e=v\r\n{}\r\n1\r\nx\r\n0\r\nX-T: v\r\n\r\n" + second}, "[200 200]", "POST /a {}x|GET /smuggled "},
		{"head in pieces", []string{"POST /a HTTP/1.1\r\nHo", "st: x\r\nContent-Length: 2\r\n", "\r\n{", "}"}, "[200]", "POST /a {}"},
		{"CL and TE", []string{"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + second}, "[400]", ""},
		{"obs-fold", []string{"GET /a HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n"}, "[400]", ""},
		{"bare LF", []string{"GET /a HTTP/1.1\nHost: x\r\n\r\n" + second}, "[400]", ""},
		{"good then refused", []string{"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxx" + second}, "[200 400]", "GET /a "},
		{"chunk size overflow", []string{"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000002\r\n{}\r\n0\r\n\r\n" + second}, "[400]", ""},
		{"chunk data overrun", []string{"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}XX\r\n0\r\n\r\n" + second}, "[400]", ""},
		{"over-long header line", []string{"GET /a HTTP/1.1\r\nHost: x\r\nX: " + strings.Repeat("a", MaxLine+10) + "\r\n\r\n"}, "[400]", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			addr, seen := gatedNetHTTP(t, nil)
			codes := exchangeRaw(t, addr, tc.parts...)
			if got := strings.Join(seen(), "|"); got != tc.seen {
				t.Errorf("handler ran %q, want %q", got, tc.seen)
			}
			if got := fmt.Sprint(codes); got != tc.codes {
				t.Errorf("answers %v, want %s", codes, tc.codes)
			}
		})
	}
}

// TestGateBackgroundRead: net/http reads ahead while a handler runs and
// cuts that read with a past deadline when it ends; a head that was half
// in by then must still be whole for the next request.
func TestGateBackgroundRead(t *testing.T) {
	addr, seen := gatedNetHTTP(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			time.Sleep(200 * time.Millisecond)
		}
	})
	codes := exchangeRaw(t, addr, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\nGET /b HT", "TP/1.1\r\nHo", "st: x\r\n\r\n")
	if got := strings.Join(seen(), "|"); got != "GET /slow |GET /b " || len(codes) != 2 {
		t.Errorf("handler ran %q, answers %v", got, codes)
	}
}

// TestGateKeepAliveHeadTimeout: a head after the first on a connection is
// bounded by the header timeout too. net/http waits for a keep-alive
// request by Peek under the idle deadline (none here) and starts the
// header timeout once bytes come; through the gate that Peek returns only
// when the whole head is in, so a head dripped a line at a time must be
// cut by the gate's own clock, not served.
func TestGateKeepAliveHeadTimeout(t *testing.T) {
	addr, seen := gatedNetHTTPTimeout(t, 100*time.Millisecond, nil)
	parts := []string{"GET /a HTTP/1.1\r\nHost: x\r\n\r\n", "GET /b HTTP/1.1\r\n"}
	for i := range 12 { // 12 pauses of 50 ms: 6x the header timeout
		parts = append(parts, fmt.Sprintf("X-%d: v\r\n", i))
	}
	parts = append(parts, "Host: x\r\n\r\n")
	codes := exchangeRaw(t, addr, parts...)
	if got := strings.Join(seen(), "|"); got != "GET /a " || fmt.Sprint(codes) != "[200]" {
		t.Errorf("handler ran %q, answers %v; want only GET /a answered", got, codes)
	}
}

// TestGateHeadClockWaitsForHandler: a pipelined head that comes in while
// a handler runs (net/http's background read) is timed from when the
// handler ends, as net/http times it, so a slow response does not cut it.
func TestGateHeadClockWaitsForHandler(t *testing.T) {
	addr, seen := gatedNetHTTPTimeout(t, 100*time.Millisecond, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			time.Sleep(450 * time.Millisecond)
		}
	})
	// 4 pauses of 50 ms: twice the header timeout, within the handler's sleep.
	codes := exchangeRaw(t, addr, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\nGET /b HT", "TP/1.1\r\n", "X-1: v\r\n", "X-2: v\r\n", "Host: x\r\n\r\n")
	if got := strings.Join(seen(), "|"); got != "GET /slow |GET /b " || fmt.Sprint(codes) != "[200 200]" {
		t.Errorf("handler ran %q, answers %v", got, codes)
	}
}

// readerConn is a net.Conn whose reads come from r (the gate's fuzz input).
type readerConn struct {
	net.Conn
	r io.Reader
}

func (c readerConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// FuzzGate: whatever bytes come in, net/http reading what the gate passes
// on finds no request the lean parser would not find in the input, in the
// same order with the same body.
func FuzzGate(f *testing.F) {
	for _, s := range []string{
		"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}GET /b HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2;e\r\n{}\r\n0\r\nT: v\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /s HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /a HTTP/1.1\nHost: x\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		g := &gateConn{Conn: readerConn{r: bytes.NewReader(raw)}}
		g.br = bufio.NewReaderSize(g.Conn, readBufSize)
		out, _ := io.ReadAll(g)

		var lean []string
		src := bytes.NewReader(raw)
		c := &conn{srv: &Server{}}
		for {
			if c.br == nil { // a body read to its end hands an empty buffer back
				c.br = bufio.NewReaderSize(src, readBufSize)
			}
			head, err := c.readHead(true)
			if err != nil {
				break
			}
			r := &http.Request{URL: &url.URL{}}
			var vals [16]string
			p, err := parseRequest(head, nil, r, vals[:], nil)
			if err != nil {
				break
			}
			var b []byte
			if r.ContentLength != 0 {
				if b, err = io.ReadAll(&body{c: c, chunked: p.chunked, n: max(r.ContentLength, 0)}); err != nil {
					break
				}
			}
			lean = append(lean, r.Method+" "+r.RequestURI+" "+string(b))
		}

		br := bufio.NewReader(bytes.NewReader(out))
		for i := 0; ; i++ {
			r, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			b, err := io.ReadAll(r.Body)
			if err != nil {
				return
			}
			got := r.Method + " " + r.RequestURI + " " + string(b)
			if i >= len(lean) || lean[i] != got {
				t.Fatalf("net/http read request %d as %q; the lean parser read %q\ninput %q\ngate passed %q", i, got, lean, raw, out)
			}
		}
	})
}
