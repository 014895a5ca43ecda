package enginestats

import (
	"bufio"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestAnswered: the scheduler finishes a scrape itself only when the
// buffered bytes hold a whole response; anything partial or unsure is
// left to the worker's blocking reads.
func TestAnswered(t *testing.T) {
	const ok = "HTTP/1.1 200 OK\r\n"
	tests := []struct {
		name, resp string
		want       bool
	}{
		{"content-length whole", ok + "Content-Length: 5\r\n\r\nhello", true},
		{"content-length short", ok + "Content-Length: 5\r\n\r\nhel", false},
		{"content-length lower case", ok + "content-length: 2\r\n\r\nhi", true},
		{"headers cut", ok + "Content-Length: 5\r\n", false},
		{"status line only", "HTTP/1.1 200", false},
		{"chunked whole", ok + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", true},
		{"chunked with extension and trailer", ok + "Transfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n0\r\nX-T: 1\r\n\r\n", true},
		{"chunked without last chunk", ok + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", false},
		{"chunked cut in data", ok + "Transfer-Encoding: chunked\r\n\r\na\r\nhello", false},
		{"chunked without final blank line", ok + "Transfer-Encoding: chunked\r\n\r\n0\r\n", false},
		{"chunked bad size", ok + "Transfer-Encoding: chunked\r\n\r\nzz\r\n", false},
		{"read to close", ok + "Content-Type: text/plain\r\n\r\nbody", false},
		{"bad length", ok + "Content-Length: x\r\n\r\n", false},
		{"404 headers are enough", "HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\n", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := answered([]byte(tt.resp)); got != tt.want {
				t.Errorf("answered(%q) = %v, want %v", tt.resp, got, tt.want)
			}
		})
	}
}

// TestTryReceive: an answer that has arrived whole is read without
// waiting; one that has not is left unread (the worker's get reads it
// from its first byte); a connection the engine closed is dropped.
func TestTryReceive(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	answers := make(chan string)
	next := make(chan struct{}) // releases the next piece of an answer split with "|"
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		for a := range answers {
			for { // one request: read to its blank line
				line, err := br.ReadString('\n')
				if err != nil {
					return
				}
				if line == "\r\n" {
					break
				}
			}
			for i, part := range strings.Split(a, "|") {
				if i > 0 {
					<-next
				}
				_, _ = c.Write([]byte(part))
			}
		}
	}()
	g := newGetter("http://"+ln.Addr().String()+"/metrics", "")
	deadline := func() time.Time { return time.Now().Add(2 * time.Second) }
	if _, err := g.send(deadline()); err != nil {
		t.Fatal(err)
	}
	const body = "vllm:num_requests_running 1\n"
	answers <- "HTTP/1.1 200 OK\r\nContent-Length: 28\r\n\r\n" + body
	time.Sleep(30 * time.Millisecond) // arrived, nothing more to come
	got, done, err := g.tryReceive(1<<20, nil)
	if !done || err != nil || string(got) != body {
		t.Fatalf("whole answer: %q, done %v, err %v", got, done, err)
	}

	// In two pieces: the first try sees half and leaves it; get reads it all.
	if !g.presend() {
		t.Fatal("presend on the open connection failed")
	}
	answers <- "HTTP/1.1 200 OK\r\nContent-Length: 28\r\n\r\nvllm:num_|requests_running 1\n"
	time.Sleep(30 * time.Millisecond)
	if _, done, _ := g.tryReceive(1<<20, nil); done {
		t.Fatal("half an answer was taken")
	}
	next <- struct{}{}
	got, err = g.get(deadline(), 1<<20, nil, true)
	if err != nil || string(got) != body {
		t.Fatalf("get after a try: %q, %v", got, err)
	}

	// In two pieces again: a later try reads the rest on top of what the
	// first one left buffered, without the worker.
	if !g.presend() {
		t.Fatal("presend failed")
	}
	answers <- "HTTP/1.1 200 OK\r\nContent-Length: 28\r\n\r\nvllm:num_|requests_running 1\n"
	time.Sleep(30 * time.Millisecond)
	if _, done, _ := g.tryReceive(1<<20, nil); done {
		t.Fatal("half an answer was taken")
	}
	next <- struct{}{}
	waitFor(t, "a try to take the whole answer", func() bool {
		got, done, err = g.tryReceive(1<<20, nil)
		return done
	})
	if err != nil || string(got) != body {
		t.Fatalf("a try after the rest arrived: %q, %v", got, err)
	}

	// Nothing yet: not done, and the connection stays.
	if !g.presend() {
		t.Fatal("presend failed")
	}
	if _, done, _ := g.tryReceive(1<<20, nil); done {
		t.Fatal("an answer not sent yet was taken")
	}
	close(answers) // the engine closes the connection
	waitFor(t, "the closed connection to be dropped", func() bool {
		if _, done, _ := g.tryReceive(1<<20, nil); done {
			t.Fatal("a closed connection gave an answer")
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.so == nil
	})
	if g.presend() {
		t.Error("presend wrote on a connection the engine closed")
	}
	g.close()
}

// TestGetAfterTryDroppedClosed: when the engine closed the kept
// connection, presend's request is lost and tryReceive drops the
// connection; the worker's get then asks again on a fresh one, as get
// does for any request on a connection the engine closed.
func TestGetAfterTryDroppedClosed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const body = "vllm:num_requests_running 1\n"
	go func() {
		for i := 0; ; i++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			br := bufio.NewReader(c)
			for { // one request: read to its blank line
				line, err := br.ReadString('\n')
				if err != nil || line == "\r\n" {
					break
				}
			}
			_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 28\r\n\r\n" + body))
			if i == 0 {
				_ = c.Close() // the engine restarts: the kept connection goes
			}
		}
	}()
	g := newGetter("http://"+ln.Addr().String()+"/metrics", "")
	defer g.close()
	deadline := func() time.Time { return time.Now().Add(2 * time.Second) }
	if got, err := g.get(deadline(), 1<<20, nil, false); err != nil || string(got) != body {
		t.Fatalf("first get: %q, %v", got, err)
	}
	time.Sleep(30 * time.Millisecond) // the close has arrived
	sent := g.presend()
	_, done, _ := g.tryReceive(1<<20, nil)
	if done {
		t.Fatal("a closed connection gave an answer")
	}
	got, err := g.get(deadline(), 1<<20, nil, sent)
	if err != nil || string(got) != body {
		t.Fatalf("get after the engine closed the kept connection (presend %v): %q, %v", sent, got, err)
	}
}

// TestStoppedGetterNeverDials: once stopped (its target is gone), a getter
// dials no new connection, whether it had one open or not, and whether
// the scrape had its request written already or not: a request after
// that would reach an engine nobody scrapes any more.
func TestStoppedGetterNeverDials(t *testing.T) {
	tests := []struct {
		name        string
		scrapeFirst bool // one good get before stop: a connection is open
		sent        bool // get is told presend wrote the request
	}{
		{"never dialed", false, false},
		{"open connection", true, false},
		{"open connection, request presend", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			var accepted atomic.Int32
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					accepted.Add(1)
					go func() {
						defer c.Close()
						br := bufio.NewReader(c)
						for {
							line, err := br.ReadString('\n')
							if err != nil {
								return
							}
							if line == "\r\n" {
								_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nx\n"))
							}
						}
					}()
				}
			}()
			g := newGetter("http://"+ln.Addr().String()+"/metrics", "")
			deadline := time.Now().Add(2 * time.Second)
			want := int32(0)
			if tt.scrapeFirst {
				if _, err := g.get(deadline, 1<<20, nil, false); err != nil {
					t.Fatalf("get before stop: %v", err)
				}
				want = 1
			}
			g.stop()
			if g.presend() {
				t.Error("presend wrote on a stopped getter")
			}
			if _, err := g.get(deadline, 1<<20, nil, tt.sent); !errors.Is(err, net.ErrClosed) {
				t.Errorf("get after stop: %v, want net.ErrClosed", err)
			}
			time.Sleep(30 * time.Millisecond) // a dial, had there been one, is accepted by now
			if n := accepted.Load(); n != want {
				t.Errorf("connections accepted = %d, want %d", n, want)
			}
		})
	}
}
