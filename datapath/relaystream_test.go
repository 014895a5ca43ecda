package datapath

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/infergate/infergate/spec"
)

// rawEngine is an engine that answers each request with what answer
// writes on the raw connection (framing included), so the tests can split
// an SSE body's framing wherever they like. It counts the connections it
// accepted.
type rawEngine struct {
	addr     string
	accepted atomic.Int64
}

// startRawEngine serves answer on every request of every connection (at
// most 8 per connection) until the test ends; answer returns false to
// close the connection after its answer.
func startRawEngine(t *testing.T, answer func(nc net.Conn) bool) *rawEngine {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	e := &rawEngine{addr: l.Addr().String()}
	go func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			e.accepted.Add(1)
			go func() {
				defer nc.Close()
				br := bufio.NewReader(nc)
				for range 8 {
					if readRequest(br) != nil || !answer(nc) {
						return
					}
				}
			}()
		}
	}()
	return e
}

// readRequest reads one request head and its Content-Length body.
func readRequest(br *bufio.Reader) error {
	n := 0
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return err
		}
		if line == "\r\n" {
			break
		}
		if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(k, "Content-Length") {
			n, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	_, err := io.CopyN(io.Discard, br, int64(n))
	return err
}

const rawSSEHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"

// sseChunk frames one event as a chunk.
func sseChunk(event string) string { return fmt.Sprintf("%x\r\n%s\r\n", len(event), event) }

// rawRoute starts a runtime, then a rawEngine serving answer (so the
// runtime's goroutine check runs after the engine is closed), and returns
// the URL of a rule in front of it.
func rawRoute(t *testing.T, answer func(nc net.Conn) bool) (string, *rawEngine) {
	t.Helper()
	rt, _ := newTestRuntime(t, testOptions())
	e := startRawEngine(t, answer)
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.addr, 1))
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	return ruleURL(r) + "/v1/completions", e
}

// writeApart writes each piece on its own, a pause apart, so the gateway
// reads them separately; false when the connection failed.
func writeApart(nc net.Conn, pause time.Duration, pieces ...string) bool {
	for _, p := range pieces {
		time.Sleep(pause)
		if _, err := io.WriteString(nc, p); err != nil {
			return false
		}
	}
	return true
}

// TestSSEFramingSplitAcrossReads relays SSE bodies whose chunked framing
// reaches the gateway cut at every kind of place, and checks that the
// client gets the events exactly, the stream ends cleanly, and the engine
// connection is reused for the next request.
func TestSSEFramingSplitAcrossReads(t *testing.T) {
	ev := func(k int) string { return "data: {\"tok\":" + strconv.Itoa(k) + "}\n\n" }
	for _, tc := range []struct {
		name   string
		pieces []string
	}{
		{"event per read", []string{sseChunk(ev(0)), sseChunk(ev(1)), sseChunk("data: [DONE]\n\n"), "0\r\n\r\n"}},
		{"cut in the size line", []string{sseChunk(ev(0))[:1], sseChunk(ev(0))[1:3], sseChunk(ev(0))[3:], sseChunk("data: [DONE]\n\n") + "0\r\n\r\n"}},
		{"cut in the data and its CRLF", []string{sseChunk(ev(0))[:9], sseChunk(ev(0))[9 : len(sseChunk(ev(0)))-1], "\n", sseChunk("data: [DONE]\n\n"), "0\r\n\r\n"}},
		{"several chunks in one read", []string{sseChunk(ev(0)) + sseChunk(ev(1)) + sseChunk(ev(2)), sseChunk("data: [DONE]\n\n") + "0\r", "\n\r\n"}},
		{"trailers", []string{sseChunk(ev(0)) + sseChunk("data: [DONE]\n\n"), "0\r\nX-Usage: 1\r\n", "\r\n"}},
		{"with the head", []string{""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			head := rawSSEHead
			if tc.name == "with the head" {
				head += sseChunk(ev(0)) + sseChunk("data: [DONE]\n\n") + "0\r\n\r\n"
			}
			url, e := rawRoute(t, func(nc net.Conn) bool {
				_, _ = io.WriteString(nc, head)
				return writeApart(nc, 15*time.Millisecond, tc.pieces...)
			})
			c := testClient()
			var first string
			for k := range 2 {
				res := post(t, c, url, `{"stream":true}`)
				if res.status != http.StatusOK || !strings.HasSuffix(res.body, "data: [DONE]\n\n") {
					t.Fatalf("request %d: %d %q", k, res.status, res.body)
				}
				if k == 0 {
					first = res.body
				} else if res.body != first {
					t.Fatalf("second answer %q differs from the first %q", res.body, first)
				}
			}
			if !strings.Contains(first, "data: {\"tok\":0}\n\n") {
				t.Fatalf("answer %q lacks the first event", first)
			}
			if n := e.accepted.Load(); n != 1 {
				t.Fatalf("the engine accepted %d connections; the stream's connection was not reused", n)
			}
		})
	}
}

// TestSSEEngineClosesMidEvent checks that an engine that closes its
// connection in the middle of an event (or between events) gives the
// client a cut stream, never a clean end.
func TestSSEEngineClosesMidEvent(t *testing.T) {
	for _, tc := range []struct {
		name string
		tail string
	}{
		{"mid-event", "1e\r\ndata: {\"tok\":"},
		{"mid-size-line", "1"},
		{"between events", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, _ := rawRoute(t, func(nc net.Conn) bool {
				_, _ = io.WriteString(nc, rawSSEHead)
				writeApart(nc, 10*time.Millisecond, sseChunk("data: {\"tok\":0}\n\n"), tc.tail)
				return false
			})
			expectCutAfterFirstEvent(t, url)
		})
	}
}

// TestSSESlowClientBackpressure streams far more than sockets hold to a
// client that reads nothing, and checks that the engine is held back (the
// gateway does not buffer the stream), then that the client gets every
// byte once it reads.
func TestSSESlowClientBackpressure(t *testing.T) {
	event := "data: " + strings.Repeat("x", 250) + "\n\n"
	const events = 100_000 // 25.8 MB: more than loopback sockets buffer
	var written atomic.Int64
	block := strings.Repeat(sseChunk(event), 100)
	url, _ := rawRoute(t, func(nc net.Conn) bool {
		_, _ = io.WriteString(nc, rawSSEHead)
		for k := 0; k < events/100; k++ {
			if _, err := io.WriteString(nc, block); err != nil {
				return false
			}
			written.Add(int64(len(block)))
		}
		_, _ = io.WriteString(nc, sseChunk("data: [DONE]\n\n")+"0\r\n\r\n")
		return true
	})
	c := &http.Client{Timeout: time.Minute, Transport: &http.Transport{ReadBufferSize: 4 << 10}}
	resp, err := c.Post(url, "application/json", strings.NewReader(`{"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// Wait (bounded) until the engine's writes stop moving.
	last, still := int64(-1), 0
	for k := 0; k < 500 && still < 10; k++ {
		time.Sleep(20 * time.Millisecond)
		if w := written.Load(); w == last {
			still++
		} else {
			last, still = w, 0
		}
	}
	total := int64(events) * int64(len(sseChunk(event)))
	if last >= total {
		t.Fatalf("the engine wrote all %d bytes to a client that read nothing: the gateway buffered the stream", total)
	}
	t.Logf("engine held back after %d of %d bytes", last, total)
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil || n != int64(events*len(event)+len("data: [DONE]\n\n")) {
		t.Fatalf("client read %d bytes, %v", n, err)
	}
}

// TestSSEClientGoneWhileEventsFlow checks that a client that leaves while
// the engine is sending (the relay is between reads and writes, not in a
// wait) closes the engine's connection.
func TestSSEClientGoneWhileEventsFlow(t *testing.T) {
	closed := make(chan time.Time, 1)
	url, _ := rawRoute(t, func(nc net.Conn) bool {
		_, _ = io.WriteString(nc, rawSSEHead)
		for k := 0; k < 4000; k++ { // 20 s at most
			if _, err := io.WriteString(nc, sseChunk("data: {\"tok\":"+strconv.Itoa(k)+"}\n\n")); err != nil {
				closed <- time.Now()
				return false
			}
			time.Sleep(5 * time.Millisecond)
		}
		return false
	})
	resp, err := testClient().Post(url, "application/json", strings.NewReader(`{"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for range 10 {
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	gone := time.Now()
	resp.Body.Close() // the client's connection closes with it (no keep-alive mid-body)
	select {
	case at := <-closed:
		// No timing assert (the box is shared): logged for the record.
		t.Logf("the engine's writes failed %v after the client left", at.Sub(gone))
	case <-time.After(20 * time.Second):
		t.Fatal("the engine's connection stayed open after the client left")
	}
}

// expectCutAfterFirstEvent streams from url and wants the first event
// relayed whole, then a cut (never a clean end): what a client must see
// when the engine's framing breaks after one good event.
func expectCutAfterFirstEvent(t *testing.T, url string) {
	t.Helper()
	resp, err := testClient().Post(url, "application/json", strings.NewReader(`{"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Fatalf("the client saw a clean end after %q", got)
	}
	if !strings.HasPrefix(string(got), "data: {\"tok\":0}\n\n") {
		t.Fatalf("the client got %q before the cut", got)
	}
}

// TestSSEStreamLayout holds sseStream's layout (relaystream.go): 256 bytes
// (a size class whose objects start on a cache line), what Buffer, Idle
// and Emit read in the first line, the relayed count and the part of the
// bound Next reads (its first 56 bytes) in the second. The offsets say
// where the lines fall only while each stream starts on one, so that is
// checked on heap streams too: a runtime that put a header before them
// (as it does before objects over 512 bytes with pointers) fails it.
func TestSSEStreamLayout(t *testing.T) {
	var s sseStream
	if got := unsafe.Sizeof(s); got != 256 {
		t.Errorf("sseStream is %d bytes, want 256", got)
	}
	const n = 16
	heap := make(chan *sseStream, n) // a send moves each to the heap, as relay's are
	for range n {
		heap <- &sseStream{}
	}
	close(heap)
	for p := range heap {
		if at := uintptr(unsafe.Pointer(p)) % 64; at != 0 {
			t.Fatalf("a heap sseStream starts at byte %d of a cache line, want 0", at)
		}
	}
	for _, f := range []struct {
		name string
		off  uintptr
		size uintptr
		line uintptr // 0: the first 64 bytes
	}{
		{"rb", unsafe.Offsetof(s.rb), unsafe.Sizeof(s.rb), 0},
		{"placed", unsafe.Offsetof(s.placed), unsafe.Sizeof(s.placed), 0},
		{"clk", unsafe.Offsetof(s.clk), unsafe.Sizeof(s.clk), 0},
		{"fl", unsafe.Offsetof(s.fl), unsafe.Sizeof(s.fl), 0},
		{"relayed", unsafe.Offsetof(s.relayed), unsafe.Sizeof(s.relayed), 1},
		{"bound, Next's part", unsafe.Offsetof(s.bound), 48, 1},
	} {
		if f.off < 64*f.line || f.off+f.size > 64*(f.line+1) {
			t.Errorf("%s: bytes %d–%d, want them in bytes %d–%d", f.name, f.off, f.off+f.size, 64*f.line, 64*(f.line+1))
		}
	}
}
