package upstream

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"github.com/infergate/infergate/datapath/sockio"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// decodeAll pushes raw to a decoder in the pieces cut at cuts and returns
// the data, whether the body ended, the bytes past its end and the error.
func decodeAll(kind frameKind, left uint64, raw string, cuts []int) (string, bool, int, error) {
	d := frameDecoder{kind: kind, left: left}
	var out []byte
	prev := 0
	for _, c := range append(cuts, len(raw)) {
		p := []byte(raw[prev:c])
		prev = c
		data, done, extra, err := d.decode(p)
		out = append(out, data...)
		if err != nil || done {
			return string(out), done, extra + len(raw) - c, err
		}
	}
	return string(out), false, 0, nil
}

// TestFrameDecoderMatchesChunkedReader feeds bodies to the pushed decoder
// split at every byte (and byte by byte) and checks it agrees with the
// pulled one the relay's Read uses (httputil's chunked reader and the
// trailer reading of chunkedBody): the same data, the same end, the same
// bytes left over, an error for the same inputs.
func TestFrameDecoderMatchesChunkedReader(t *testing.T) {
	for _, tc := range []struct{ name, raw string }{
		{"one event", "c\r\ndata: tok0\n\n\r\n0\r\n\r\n"},
		{"two chunks", "3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n"},
		{"extension", "3;name=v\r\nabc\r\n0;x\r\n\r\n"},
		{"uppercase hex", "A\r\nabcdefghij\r\n0\r\n\n"},
		{"bare LF", "3\nabc\r\n0\r\n\r\n"},
		{"CR in extension", "3;a\rb\r\nabc\r\n0\r\n\r\n"},
		{"trailing whitespace", "3 \t\r\nabc\r\n0\r\n\r\n"},
		{"trailers", "3\r\nabc\r\n0\r\nX-A: 1\r\nX-B: 2\r\n\r\n"},
		{"bytes after the end", "3\r\nabc\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n"},
		{"empty size", "\r\nabc\r\n0\r\n\r\n"},
		{"bad digit", "3x\r\nabc\r\n0\r\n\r\n"},
		{"space then extension", "3 ;x\r\nabc\r\n0\r\n\r\n"},
		{"no CRLF after data", "3\r\nabcd\r\n0\r\n\r\n"},
		{"LF only after data", "3\r\nabc\n0\r\n\r\n"},
		{"too large", "11111111111111111\r\n"},
		{"cut in data", "5\r\nab"},
		{"cut in trailers", "3\r\nabc\r\n0\r\nX-A: 1\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantData, wantErr, wantRest := pullChunked(tc.raw)
			check := func(cuts []int) {
				t.Helper()
				data, done, extra, err := decodeAll(frameChunked, 0, tc.raw, cuts)
				switch {
				case wantErr != nil && !errors.Is(wantErr, io.ErrUnexpectedEOF):
					if err == nil {
						t.Fatalf("cuts %v: no error, reader said %v", cuts, wantErr)
					}
					return
				case err != nil:
					t.Fatalf("cuts %v: %v, reader decoded it", cuts, err)
				case wantErr != nil: // cut short: the decoder wants more
					if done || !strings.HasPrefix(wantData, data) && !strings.HasPrefix(data, wantData) {
						t.Fatalf("cuts %v: done=%v data %q, reader %q (cut short)", cuts, done, data, wantData)
					}
					return
				}
				if !done || data != wantData || extra != wantRest {
					t.Fatalf("cuts %v: done=%v data %q extra %d, want %q and %d", cuts, done, data, extra, wantData, wantRest)
				}
			}
			check(nil)
			for k := 1; k < len(tc.raw); k++ {
				check([]int{k})
			}
			var each []int
			for k := 1; k < len(tc.raw); k++ {
				each = append(each, k)
			}
			check(each)
		})
	}
}

// pullChunked decodes raw as the Read path does.
func pullChunked(raw string) (string, error, int) {
	br := bufio.NewReader(strings.NewReader(raw))
	resp := &http.Response{Header: http.Header{headerTE: {"chunked"}}, StatusCode: 200, ProtoMajor: 1, ProtoMinor: 1}
	r, err := frameBody(br, http.MethodPost, resp, new(lengthBody), framingBits, "")
	if err != nil {
		return "", err, 0
	}
	data, err := io.ReadAll(r)
	return string(data), err, br.Buffered()
}

func TestFrameDecoderLengthAndClose(t *testing.T) {
	for _, tc := range []struct {
		name      string
		kind      frameKind
		left      uint64
		raw       string
		data      string
		done      bool
		extra     int
		cutsEvery bool
	}{
		{"length exact", frameLength, 5, "hello", "hello", true, 0, true},
		{"length with extra", frameLength, 3, "hello", "hel", true, 2, false},
		{"length short", frameLength, 9, "hello", "hello", false, 0, true},
		{"until close", frameClose, 0, "hello", "hello", false, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cuts := [][]int{nil}
			if tc.cutsEvery {
				for k := 1; k < len(tc.raw); k++ {
					cuts = append(cuts, []int{k})
				}
			}
			for _, c := range cuts {
				data, done, extra, err := decodeAll(tc.kind, tc.left, tc.raw, c)
				if err != nil || data != tc.data || done != tc.done || extra != tc.extra {
					t.Fatalf("cuts %v: %q done=%v extra=%d err=%v", c, data, done, extra, err)
				}
			}
		})
	}
}

// scriptEngine answers every request on a connection with the pieces of
// script, each written on its own after a pause (so they arrive in
// separate reads), then does what end says: "keep" (wait for the next
// request), "close", or "hold" (silent until the client goes). It counts
// accepted connections and reports when one closes from the client side.
type scriptEngine struct {
	addr     string
	accepted atomic.Int64
	gone     chan struct{} // a connection's peer closed it (buffered)
}

func startScriptEngine(t *testing.T, head string, script []string, pause time.Duration, end string) *scriptEngine {
	t.Helper()
	e := &scriptEngine{gone: make(chan struct{}, 16)}
	e.addr = serveEach(t, func(nc net.Conn) {
		e.accepted.Add(1)
		e.serve(nc, head, script, pause, end)
	}).Addr().String()
	return e
}

func (e *scriptEngine) serve(nc net.Conn, head string, script []string, pause time.Duration, end string) {
	defer nc.Close()
	br := bufio.NewReader(nc)
	for range 8 { // requests per connection, bounded
		for { // the request head; the tests send no body
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			if line == "\r\n" {
				break
			}
		}
		if _, err := io.WriteString(nc, head); err != nil {
			return
		}
		for _, piece := range script {
			time.Sleep(pause)
			if _, err := io.WriteString(nc, piece); err != nil {
				e.gone <- struct{}{}
				return
			}
		}
		switch end {
		case "close":
			return
		case "hold":
			_, _ = io.Copy(io.Discard, nc)
			e.gone <- struct{}{}
			return
		}
	}
}

// collect is a StreamSink that keeps what it is given; block, when set,
// is received from before each Emit returns.
type collect struct {
	buf     []byte
	lent    bool
	got     []byte
	emits   int
	block   chan struct{}
	onEmit  func()
	emitErr error
}

func (s *collect) Buffer() []byte {
	s.lent = true
	if s.buf == nil {
		s.buf = make([]byte, 64)
	}
	return s.buf
}
func (s *collect) Idle() { s.lent = false }
func (s *collect) Emit(p []byte, _ sockio.Mono) error {
	s.got = append(s.got, p...)
	s.emits++
	if s.onEmit != nil {
		s.onEmit()
	}
	if s.block != nil {
		<-s.block
	}
	return s.emitErr
}

const sseHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"

// TestStream relays scripted engine answers whose framing is split across
// reads at awkward places and checks the bytes, the end, and whether the
// connection went back to the pool (a second request on it).
func TestStream(t *testing.T) {
	ev := "c\r\ndata: tok0\n\n\r\n"
	for _, tc := range []struct {
		name    string
		head    string
		script  []string
		end     string
		want    string
		wantErr error
		reused  bool
	}{
		{"chunked, split everywhere", sseHead, []string{"c", "\r", "\ndata: to", "k0\n\n\r", "\n", "c\r\ndata: tok1\n\n\r\n0\r", "\nX-T: 1\r\n", "\r\n"}, "keep",
			"data: tok0\n\ndata: tok1\n\n", nil, true},
		{"chunked, event per read", sseHead, []string{ev, ev, ev, "0\r\n\r\n"}, "keep", strings.Repeat("data: tok0\n\n", 3), nil, true},
		{"events with the head", sseHead + ev + ev, []string{"0\r\n\r\n"}, "keep", strings.Repeat("data: tok0\n\n", 2), nil, true},
		{"whole body with the head", sseHead + ev + "0\r\n\r\n", nil, "keep", "data: tok0\n\n", nil, true},
		{"engine closes mid-event", sseHead, []string{ev, "c\r\ndata: t"}, "close", "data: tok0\n\ndata: t", io.ErrUnexpectedEOF, false},
		{"engine closes between events", sseHead, []string{ev}, "close", "data: tok0\n\n", io.ErrUnexpectedEOF, false},
		{"bad framing", sseHead, []string{ev, "zz\r\n"}, "hold", "data: tok0\n\n", errBadChunk, false},
		{"content-length", "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 24\r\n\r\n",
			[]string{"data: tok0\n\n", "data: tok1\n\n"}, "keep", "data: tok0\n\ndata: tok1\n\n", nil, true},
		{"until close", "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n",
			[]string{"data: tok0\n\n", "data: tok1\n\n"}, "close", "data: tok0\n\ndata: tok1\n\n", nil, false},
	} {
		for _, mode := range []string{"own waits", "loops", "loops off"} {
			t.Run(tc.name+"/"+mode, func(t *testing.T) {
				testStreamCase(t, tc.head, tc.script, tc.end, tc.want, tc.wantErr, tc.reused, mode)
			})
		}
	}
}

// testStreamCase is one TestStream case, its sink a plain one ("own
// waits") or a ClientSink, with Options.RelayLoops on ("loops") or off.
func testStreamCase(t *testing.T, head string, script []string, end, want string, wantErr error, reused bool, mode string) {
	e := startScriptEngine(t, head, script, 20*time.Millisecond, end)
	o := DefaultOptions()
	o.RelayLoops = mode == "loops"
	c := NewWithOptions(time.Second, 4, o, nil)
	defer c.CloseIdle()
	ep := endpoint(e.addr)
	resp, err := c.Send(t.Context(), Leg{Endpoint: ep, Method: "GET", Path: "/v1/stream"})
	if err != nil {
		t.Fatal(err)
	}
	var s *collect
	var sink StreamSink
	if mode == "own waits" {
		s = &collect{}
		sink = s
	} else {
		cs := &clientCollect{client: sockio.New(loopbackConn(t))}
		s, sink = &cs.collect, cs
	}
	ok, err := resp.Body.(Streamer).Stream(sink)
	resp.Body.Close()
	if !ok {
		if rawStreamable() {
			t.Skip("no plaintext socket calls here")
		}
		t.Fatal("Stream refused a plaintext engine connection")
	}
	if string(s.got) != want || !errors.Is(err, wantErr) || (wantErr == nil) != (err == nil) {
		t.Fatalf("got %q, %v; want %q, %v", s.got, err, want, wantErr)
	}
	if s.lent {
		t.Fatal("the buffer is still lent after Stream returned")
	}
	if end == "close" {
		return
	}
	// A second request: on the same connection when it was reused.
	resp, err = c.Send(t.Context(), Leg{Endpoint: ep, Method: "GET", Path: "/v1/stream"})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if got := e.accepted.Load() == 1; got != reused {
		t.Fatalf("connections accepted %d; reuse wanted %v", e.accepted.Load(), reused)
	}
}

// clientCollect is a collect that names a client connection
// (ClientSink), so Stream may run it from the client's loops; it never
// writes to it.
type clientCollect struct {
	collect
	client *sockio.Conn
}

func (s *clientCollect) Client() *sockio.Conn { return s.client }

// loopbackConn is one end of a loopback TCP connection whose peer reads
// until it closes; closed with t.
func loopbackConn(t *testing.T) net.Conn {
	t.Helper()
	ln := serveEach(t, func(nc net.Conn) {
		defer nc.Close()
		_, _ = io.Copy(io.Discard, nc)
	})
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	return nc
}

// rawStreamable reports whether Stream can run on this platform.
func rawStreamable() bool { return runtime.GOOS != "linux" }

// TestStreamBackpressure holds the sink's Emit and checks that the engine,
// writing far more than the sockets can hold, stalls (Stream reads no
// more while Emit blocks), then that everything arrives once it is let go.
func TestStreamBackpressure(t *testing.T) {
	const event = "data: 0123456789abcdef0123456789abcdef\n\n"
	const total = 256 << 10 // events
	chunk := fmt.Sprintf("%x\r\n%s\r\n", len(event), event)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var written atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		nc, err := l.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		br := bufio.NewReader(nc)
		for {
			line, err := br.ReadString('\n')
			if err != nil || line == "\r\n" {
				break
			}
		}
		_, _ = io.WriteString(nc, sseHead)
		block := []byte(strings.Repeat(chunk, 256))
		for k := 0; k < total/256; k++ {
			if _, err := nc.Write(block); err != nil {
				return
			}
			written.Add(int64(len(block)))
		}
		_, _ = io.WriteString(nc, "0\r\n\r\n")
	}()
	c := New(time.Second, 4, nil)
	defer c.CloseIdle()
	resp, err := c.Send(t.Context(), Leg{Endpoint: endpoint(l.Addr().String()), Method: "GET", Path: "/"})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	release := make(chan struct{})
	s := &collect{block: make(chan struct{})}
	var stalledAt int64
	go func() {
		// Wait (bounded) until the engine's writes stop moving, note
		// where, then let every Emit through.
		last, still := int64(-1), 0
		for k := 0; k < 400 && still < 5; k++ {
			time.Sleep(20 * time.Millisecond)
			if w := written.Load(); w == last {
				still++
			} else {
				last, still = w, 0
			}
		}
		stalledAt = last
		close(release)
		for {
			select {
			case s.block <- struct{}{}:
			case <-done:
				close(s.block)
				return
			}
		}
	}()
	ok, err := resp.Body.(Streamer).Stream(s)
	if !ok {
		t.Skip("no plaintext socket calls here")
	}
	<-release
	if err != nil {
		t.Fatal(err)
	}
	full := int64(total) * int64(len(chunk))
	if stalledAt >= full {
		t.Fatalf("the engine wrote all %d bytes while Emit was held: no backpressure", full)
	}
	if len(s.got) != total*len(event) {
		t.Fatalf("relayed %d bytes, want %d", len(s.got), total*len(event))
	}
	t.Logf("engine stalled after %d of %d bytes", stalledAt, full)
}

// TestStreamDeadlineAndAbort checks that a silent engine ends Stream with
// the read deadline, and an abort (the client went away) at once.
func TestStreamDeadlineAndAbort(t *testing.T) {
	ev := "c\r\ndata: tok0\n\n\r\n"
	for _, abort := range []bool{false, true} {
		e := startScriptEngine(t, sseHead, []string{ev}, time.Millisecond, "hold")
		c := New(time.Second, 4, nil)
		ctx, cancel := context.WithCancel(t.Context())
		resp, err := c.Send(ctx, Leg{Endpoint: endpoint(e.addr), Method: "GET", Path: "/"})
		if err != nil {
			t.Fatal(err)
		}
		s := &collect{}
		if abort {
			s.onEmit = cancel // the client goes after the first event
		} else {
			resp.Body.(BoundedBody).SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		}
		ok, err := resp.Body.(Streamer).Stream(s)
		resp.Body.Close()
		cancel()
		c.CloseIdle()
		if !ok {
			t.Skip("no plaintext socket calls here")
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) || string(s.got) != "data: tok0\n\n" {
			t.Fatalf("abort=%v: %q, %v", abort, s.got, err)
		}
		select {
		case <-e.gone:
		case <-time.After(10 * time.Second):
			t.Fatalf("abort=%v: the engine never saw the connection close", abort)
		}
	}
}

// TestStreamSinkPanics: a sink that panics inside the engine socket's read
// wait (a handler bug) unwinds through it: the lent buffer is returned,
// the connection is discarded at Close (the socket's read lock let go, or
// Close would block), and the client goes on serving.
func TestStreamSinkPanics(t *testing.T) {
	e := startScriptEngine(t, sseHead, []string{"c\r\ndata: tok0\n\n\r\n", "0\r\n\r\n"}, 20*time.Millisecond, "keep")
	c := New(time.Second, 4, nil)
	defer c.CloseIdle()
	ep := endpoint(e.addr)
	resp, err := c.Send(t.Context(), Leg{Endpoint: ep, Method: "GET", Path: "/v1/stream"})
	if err != nil {
		t.Fatal(err)
	}
	s := &collect{onEmit: func() { panic("sink bug") }}
	func() {
		defer func() {
			if v := recover(); v != "sink bug" {
				t.Fatalf("recovered %v", v)
			}
		}()
		_, _ = resp.Body.(Streamer).Stream(s)
	}()
	if s.lent {
		t.Fatal("the buffer is still lent after the panic")
	}
	resp.Body.Close()
	resp, err = c.Send(t.Context(), Leg{Endpoint: ep, Method: "GET", Path: "/v1/stream"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(got) != "data: tok0\n\n" {
		t.Fatalf("after the panic: %q, %v", got, err)
	}
	if n := e.accepted.Load(); n != 2 {
		t.Fatalf("the engine accepted %d connections: the panicked stream's was reused", n)
	}
}

// TestFrameDecoderLeavesOneRun checks where decode leaves the body bytes:
// one run (a read of one chunk, the usual SSE event) stays where it lies in
// p, uncopied; several runs are gathered at the first one's place.
func TestFrameDecoderLeavesOneRun(t *testing.T) {
	for _, tc := range []struct {
		name, raw, want string
		at              int // where data must start in p
	}{
		{"one chunk", "c\r\ndata: tok0\n\n\r\n", "data: tok0\n\n", 3},
		{"two chunks", "3\r\nabc\r\n4\r\ndefg\r\n", "abcdefg", 3},
		{"data first", "efg\r\n2\r\nhi\r\n", "efghi", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := frameDecoder{kind: frameChunked}
			p := []byte(tc.raw)
			if tc.at == 0 { // a chunk of 3 whose size line came in an earlier read
				d.state, d.left = csData, 3
			}
			data, _, _, err := d.decode(p)
			if err != nil || string(data) != tc.want {
				t.Fatalf("decode: %q, %v; want %q", data, err, tc.want)
			}
			if &data[0] != &p[tc.at] {
				t.Errorf("data starts at byte %d of p, want %d", cap(p)-cap(data), tc.at)
			}
		})
	}
}
