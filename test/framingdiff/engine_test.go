package framingdiff

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// record is what an engine read on one of its connections: a whole
// request, a head whose body never ended (partial), or bytes that are no
// request at all (garbage).
type record struct {
	sid     int // the shape's run id from the path; -1 when none
	req     wantReq
	partial bool
	garbage string
}

// engine is a recording engine on a raw TCP listener: it reads requests
// off each connection itself, so whatever a front end writes (including
// bytes that are no request) is seen, and answers each whole request 200.
type engine struct {
	ln net.Listener
	wg sync.WaitGroup
	mu sync.Mutex
	rs []record
}

func startEngine(t *testing.T, ip string) *engine {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatalf("engine listen on %s: %v", ip, err)
	}
	e := &engine{ln: ln}
	var conns sync.Map
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Store(c, true)
			e.wg.Add(1)
			go func() {
				defer e.wg.Done()
				defer conns.Delete(c)
				e.serve(c)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		conns.Range(func(k, _ any) bool { _ = k.(net.Conn).Close(); return true })
		e.wg.Wait()
	})
	return e
}

func (e *engine) addr() string { return e.ln.Addr().String() }

func (e *engine) add(r record) {
	e.mu.Lock()
	e.rs = append(e.rs, r)
	e.mu.Unlock()
}

func (e *engine) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		if _, err := br.Peek(1); err != nil {
			return // closed between requests
		}
		r, err := http.ReadRequest(br)
		if err != nil {
			rest, _ := br.Peek(br.Buffered())
			e.add(record{sid: -1, garbage: err.Error() + ": " + strconv.Quote(string(rest))})
			return
		}
		rec := record{sid: sidOf(r.URL.Path), req: wantReq{r.Method, r.URL.Path, ""}}
		b, err := io.ReadAll(r.Body)
		rec.req.body = string(b)
		if err != nil {
			rec.partial = true
			e.add(rec)
			return
		}
		e.add(rec)
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"); err != nil {
			return
		}
		if r.Close {
			return
		}
	}
}

// sidOf reads the run id out of a path /v1/s<sid>/<tag>.
func sidOf(path string) int {
	rest, ok := strings.CutPrefix(path, "/v1/s")
	if !ok {
		return -1
	}
	num, _, _ := strings.Cut(rest, "/")
	n, err := strconv.Atoi(num)
	if err != nil {
		return -1
	}
	return n
}

// take removes and returns the records of run id sid, in arrival order.
func (e *engine) take(sid int) []record {
	e.mu.Lock()
	defer e.mu.Unlock()
	var got, keep []record
	for _, r := range e.rs {
		if r.sid == sid {
			got = append(got, r)
		} else {
			keep = append(keep, r)
		}
	}
	e.rs = keep
	return got
}

// stray returns (and drops) what no shape can be charged with: garbage and
// requests without a run id.
func (e *engine) stray() []record {
	e.mu.Lock()
	defer e.mu.Unlock()
	var got, keep []record
	for _, r := range e.rs {
		if r.sid < 0 {
			got = append(got, r)
		} else {
			keep = append(keep, r)
		}
	}
	e.rs = keep
	return got
}
