package datapath

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/spec"
)

// TestSSEClientGoneWhileEngineIdle checks that a client leaving while the
// engine is silent (the relay waits inside the engine socket's read, the
// client's socket is inside its own read callback) closes the engine's
// connection long before the stream idle bound would.
func TestSSEClientGoneWhileEngineIdle(t *testing.T) {
	closed := make(chan time.Time, 1)
	url, _ := rawRoute(t, func(nc net.Conn) bool {
		_, _ = io.WriteString(nc, rawSSEHead+sseChunk("data: {\"tok\":0}\n\n"))
		_ = nc.SetReadDeadline(time.Now().Add(20 * time.Second))
		_, _ = nc.Read(make([]byte, 1)) // EOF when the gateway closes
		closed <- time.Now()
		return false
	})
	resp, err := testClient().Post(url, "application/json", strings.NewReader(`{"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	gone := time.Now()
	resp.Body.Close()
	select {
	case at := <-closed:
		t.Logf("the engine saw the close %v after the client left", at.Sub(gone))
	case <-time.After(20 * time.Second):
		t.Fatal("the engine's connection stayed open after the client left an idle stream")
	}
}

// TestSSEBytesPastTheEnd: an engine that sends bytes after its answer's
// end (after the last chunk, or past Content-Length) is out of sync: the
// client gets the answer exactly and the connection is not reused, so the
// next request never reads the stray bytes as its answer. (Stray bytes
// that come only after the connection went back to the pool and was
// picked again are beyond any check: HTTP/1.1 cannot tell them apart.)
func TestSSEBytesPastTheEnd(t *testing.T) {
	const stray = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 13\r\n\r\ndata: STRAY\n\n"
	done := "data: [DONE]\n\n"
	for _, tc := range []struct{ name, head, body string }{
		{"chunked, one write", rawSSEHead, sseChunk(done) + "0\r\n\r\n" + stray},
		{"content-length, one write", "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 14\r\n\r\n", done + stray},
		{"chunked, split", rawSSEHead, sseChunk(done) + "0\r\n|\r\n" + stray},
		{"chunked, trailers split", rawSSEHead, sseChunk(done) + "0\r\nX-A: 1\r|\n\r\n" + stray},
		{"content-length, split", "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 14\r\n\r\n", done[:5] + "|" + done[5:] + stray},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, e := rawRoute(t, func(nc net.Conn) bool {
				_, _ = io.WriteString(nc, tc.head)
				return writeApart(nc, 15*time.Millisecond, strings.Split(tc.body, "|")...)
			})
			c := testClient()
			for k := range 2 {
				res := post(t, c, url, `{"stream":true}`)
				if res.status != http.StatusOK || res.body != done {
					t.Fatalf("request %d: %d %q", k, res.status, res.body)
				}
			}
			if n := e.accepted.Load(); n != 2 {
				t.Fatalf("the engine accepted %d connections, want 2 (an out-of-sync connection reused)", n)
			}
		})
	}
}

// TestSSEHostileFraming: chunked framing a broken or hostile engine sends
// (a size past 64 bits, leading zeros past 16 digits, a bare LF or a wrong
// byte after the data, a size line without end) cuts the client's stream
// after the events before it, never a clean end; the events before it are
// relayed even when the bad framing comes in the same read (as the Read
// path relays them).
func TestSSEHostileFraming(t *testing.T) {
	first := sseChunk("data: {\"tok\":0}\n\n")
	for _, tc := range []struct{ name, tail string }{
		{"size past 64 bits", "10000000000000000\r\nxx\r\n0\r\n\r\n"},
		{"17 digits with leading zeros", "00000000000000003\r\nabc\r\n0\r\n\r\n"},
		{"bare LF after data", "3\r\nabc\n0\r\n\r\n"},
		{"wrong byte after data", "3\r\nabcd\r\n0\r\n\r\n"},
		{"bare LF size line", "3\nabc\r\n0\r\n\r\n"},
		{"huge size, few bytes", "ffffffffffffffff\r\nabc"},
	} {
		for _, apart := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/apart=%v", tc.name, apart), func(t *testing.T) {
				url, _ := rawRoute(t, func(nc net.Conn) bool {
					_, _ = io.WriteString(nc, rawSSEHead)
					if apart {
						writeApart(nc, 10*time.Millisecond, first, tc.tail)
					} else { // the good event and the bad framing in one read
						writeApart(nc, 10*time.Millisecond, first+tc.tail)
					}
					time.Sleep(50 * time.Millisecond)
					return false
				})
				expectCutAfterFirstEvent(t, url)
			})
		}
	}
}

// countInfergateGoroutines counts the goroutines running code of this
// module outside the tests (the datapath's and its packages': sockio's
// hang-up watcher, h1's, the pool's reaper).
func countInfergateGoroutines() (int, string) {
	buf := make([]byte, 8<<20)
	n := runtime.Stack(buf, true)
	for n == len(buf) { // cut short: a thousand held streams can fill 8 MiB
		buf = make([]byte, 2*len(buf))
		n = runtime.Stack(buf, true)
	}
	buf = buf[:n]
	n, last := 0, ""
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("infergate/infergate/")) && !bytes.Contains(g, []byte("testing.tRunner")) &&
			!bytes.Contains(g, []byte("_test.go")) {
			n++
			last = string(g)
		}
	}
	return n, last
}

// TestSSEHeldStreamsEndOnRemoveAndClose holds many streams on a silent
// engine, removes the rule and closes the runtime: Close returns within its
// context, every client's stream ends, and no goroutine of the module is
// left (the hang-up watchers and the relay loops included). With the relay
// loops and without: a held stream waits in a loop's epoll set or in its
// own goroutine's read wait.
func TestSSEHeldStreamsEndOnRemoveAndClose(t *testing.T) {
	for _, loops := range []bool{true, false} {
		t.Run(fmt.Sprintf("loops=%v", loops), func(t *testing.T) {
			heldStreamsEndOnRemoveAndClose(t, loops)
		})
	}
}

func heldStreamsEndOnRemoveAndClose(t *testing.T, loops bool) {
	const streams = 1000
	o := testOptions()
	o.DrainGrace = time.Second
	o.DialTimeout = 20 * time.Second // waves of 100 dials on a loaded box
	o.Upstream.RelayLoops = loops
	// Every stream on its own engine connection: over the cap a request
	// waits for a free one only until its first-byte bound, and no stream
	// here frees one before Remove. (Under the default cap of 256 the
	// streams past it were served only as the first ones ended at their
	// idle bound, a race between two equal bounds that answered 504
	// upstream_timeout on a loaded box: a slot freed just before the
	// waiter's bound left the engine no time — such a slot is now passed
	// over, 504 upstream_pool_timeout; never 1,000 held at once.)
	o.Upstream.MaxConnsPerEndpoint = streams
	rt, _ := newTestRuntime(t, o)
	var engines sync.WaitGroup
	var open atomic.Int64 // engine connections inside a held stream
	e := startRawEngine(t, func(nc net.Conn) bool {
		engines.Add(1)
		defer engines.Done()
		open.Add(1)
		defer open.Add(-1)
		_, _ = io.WriteString(nc, rawSSEHead+sseChunk("data: {\"tok\":0}\n\n"))
		_ = nc.SetReadDeadline(time.Now().Add(2 * time.Minute))
		_, _ = nc.Read(make([]byte, 1))
		return false
	})
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.addr, 1))
	// The streams' idle bound (capped by the rule's) must outlast opening
	// them all, however slow the box: they end at Remove, not on their own.
	r.IdleTimeout = 2 * time.Minute
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	url := ruleURL(r) + "/v1/completions"
	c := &http.Client{Timeout: 3 * time.Minute, Transport: &http.Transport{MaxConnsPerHost: 0, DisableKeepAlives: true}}
	var wg sync.WaitGroup
	started := make(chan struct{}, streams)
	for k := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.Post(url, "application/json", strings.NewReader(`{"stream":true}`))
			if err != nil {
				t.Errorf("stream %d: %v", k, err)
				started <- struct{}{}
				return
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			if _, err := br.ReadString('\n'); err != nil || resp.StatusCode != http.StatusOK {
				t.Errorf("stream refused: %d %s %v", resp.StatusCode, resp.Header.Get(HeaderError), err)
			}
			started <- struct{}{}
			_, _ = io.Copy(io.Discard, br)
		}()
		if k%100 == 99 { // in waves: the engine's accept backlog is short
			for range 100 {
				<-started
			}
		}
	}
	for range streams % 100 {
		<-started
	}
	if t.Failed() {
		t.FailNow()
	}
	// Every stream's first event came: each engine connection is held.
	if n := open.Load(); n != streams {
		t.Fatalf("%d of %d streams held at the engine before Remove", n, streams)
	}
	before, _ := countInfergateGoroutines()
	t.Logf("%d streams held; %d module goroutines", streams, before)
	rt.Remove(r)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	t0 := time.Now()
	if err := rt.Close(ctx); err != nil {
		t.Logf("Close: %v", err)
	}
	t.Logf("Close took %v", time.Since(t0))
	if ctx.Err() != nil {
		t.Fatal("Close did not return within its context")
	}
	waited := make(chan struct{})
	go func() { wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(20 * time.Second):
		t.Fatal("client streams still open after Close")
	}
	engines.Wait()
	var n int
	var last string
	for range 300 { // ≤ 3 s: the watchers' and loops' idle tick is 250 ms
		if n, last = countInfergateGoroutines(); n == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n != 0 {
		t.Fatalf("%d module goroutines left, e.g.:\n%s", n, last)
	}
}

// TestSSEStalledClientEndsAtStreamCap: a client that keeps its connection
// open but reads nothing (its window shut) must not hold the stream, the
// engine's connection and a relay buffer past the rule's stream cap: the
// relay is blocked in a client write then, where the cap, a read deadline
// on the engine, never fires.
func TestSSEStalledClientEndsAtStreamCap(t *testing.T) {
	rt, _ := newTestRuntime(t, testOptions())
	e, engineDone := startFloodingEngine(t, rawSSEHead, sseChunk("data: "+strings.Repeat("x", 1000)+"\n\n"))
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.addr, 1))
	r.MaxStreamDuration = 500 * time.Millisecond
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	sendStalled(t, ruleURL(r), sseRequest("/v1/completions", `{"stream":true}`))
	waitEngineDone(t, engineDone, 15*time.Second, "stream cap 500ms")
}

// TestSSEWriteBoundClearedForNextRequest: the client write bound a stream
// sets must not outlive it: answers on the same keep-alive connection
// after the first stream's cap has passed, big enough in all to block the
// gateway's writes, all arrive (a bound left behind cut the connection at
// the first blocked write).
func TestSSEWriteBoundClearedForNextRequest(t *testing.T) {
	rt, _ := newTestRuntime(t, testOptions())
	e := startRawEngine(t, func(nc net.Conn) bool {
		_, err := io.WriteString(nc, rawSSEHead+sseChunk("data: [DONE]\n\n")+"0\r\n\r\n")
		return err == nil
	})
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.addr, 1))
	r.MaxStreamDuration = 200 * time.Millisecond
	r.AllowedPaths = []string{"/v1/completions"}
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	const n = 4000
	if got := writeBoundLeftBehind(t, ruleURL(r)[len("http://"):], sseRequest("/v1/completions", `{"stream":true}`), 400*time.Millisecond, n); got != n {
		t.Fatalf("%d of %d answers after the stream came back", got, n)
	}
}
