package h1

import (
	"bufio"
	"io"
	"net/http"
	"testing"
	"time"
)

// TestParkWriter: a finished response's flushed write buffer rides in its
// request's state to the next request (parkWriter), unless the response
// streamed; a buffer the state carried in and the request did not use
// never stays with the connection.
func TestParkWriter(t *testing.T) {
	cases := []struct {
		name     string
		used     bool // the response took a writer (c.bw set)
		spare    bool // the state carried one in that is still unused
		streamed bool
		parked   bool // rs.bw after: the writer the response used
	}{
		{name: "small answer", used: true, parked: true},
		{name: "small answer, spare unused", used: true, spare: true, parked: true},
		{name: "streamed", used: true, streamed: true},
		{name: "streamed, spare unused", used: true, spare: true, streamed: true},
		{name: "no writer taken", spare: true},
		{name: "nothing held"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &conn{srv: &Server{}}
			var used *bufio.Writer
			if tc.used {
				used = c.srv.getWriter(&c.sock)
				c.bw = used
			}
			if tc.spare {
				c.spareW = bufio.NewWriterSize(nil, writeBufSize)
			}
			rs := new(reqState)
			c.parkWriter(rs, tc.streamed)
			if c.bw != nil || c.spareW != nil {
				t.Fatalf("the connection still holds a writer (bw %p, spare %p)", c.bw, c.spareW)
			}
			if tc.parked && rs.bw != used {
				t.Fatalf("state carries %p, want the response's writer %p", rs.bw, used)
			}
			if !tc.parked && rs.bw != nil {
				t.Fatalf("state carries a writer (%p) after a streamed or writerless response", rs.bw)
			}
		})
	}
}

// TestTakeWriter: the first write of a request uses the writer its state
// carried in before borrowing one from the pool.
func TestTakeWriter(t *testing.T) {
	for _, spare := range []bool{true, false} {
		c := &conn{srv: &Server{}}
		var want *bufio.Writer
		if spare {
			want = bufio.NewWriterSize(nil, writeBufSize)
			c.spareW = want
		}
		bw := c.writer()
		if bw == nil || c.bw != bw || c.spareW != nil {
			t.Fatalf("spare %v: writer %p, bw %p, spare left %p", spare, bw, c.bw, c.spareW)
		}
		if spare && bw != want {
			t.Fatalf("spare %v: writer %p, want the carried one %p", spare, bw, want)
		}
		if again := c.writer(); again != bw {
			t.Fatalf("spare %v: second call gave %p, want %p", spare, again, bw)
		}
	}
}

// TestIdleHoldsNoWriter: whether its answer was small (the writer parked
// in the request's state) or streamed (the writer back in the pool), a
// keep-alive connection waits for its next request holding no write
// buffer, and the next request is answered.
func TestIdleHoldsNoWriter(t *testing.T) {
	for _, flush := range []bool{false, true} {
		s, addr := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "ok")
			if flush {
				w.(http.Flusher).Flush()
			}
		}))
		nc, br := dialServer(t, addr)
		for i := range 3 {
			if _, err := io.WriteString(nc, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			if string(b) != "ok" {
				t.Fatalf("flush %v, request %d: answer %q", flush, i, b)
			}
			s.mu.Lock()
			var c *conn
			for _, c = range s.conns {
			}
			s.mu.Unlock()
			if c == nil {
				t.Fatal("no connection")
			}
			for deadline := time.Now().Add(5 * time.Second); c.state.Load() != stateIdle; {
				if time.Now().After(deadline) {
					t.Fatal("the connection did not go idle")
				}
				time.Sleep(time.Millisecond)
			}
			if raceBuild {
				continue // the fields below are the serving goroutine's
			}
			// stateIdle is stored after the writer was parked or returned.
			if c.bw != nil || c.spareW != nil {
				t.Fatalf("flush %v, request %d: the idle connection holds a write buffer", flush, i)
			}
		}
	}
}
