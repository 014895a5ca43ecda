package h1

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// leaked is what a misbehaving handler kept past its return.
type leaked struct {
	r       *http.Request
	w       http.ResponseWriter
	scratch *poisonCount
}

// poisonCount is a scratch value that counts its poisonings (atomic: the
// server's goroutine poisons, the test's reads).
type poisonCount struct{ poisoned atomic.Int32 }

func (p *poisonCount) Poison() { p.poisoned.Add(1) }

// TestPoisonedAfterReturn: with poisoning on (as in every -race build), a
// request, its ResponseWriter and its scratch that a handler keeps past
// its return are unusable once the response has gone out: the request
// reads PoisonMethod, the writer panics, the scratch was told. Each body
// shape ends the request on another path (answered whole in the read
// wait, a body read on its own, chunked).
func TestPoisonedAfterReturn(t *testing.T) {
	keep := make(chan leaked, 1)
	s := &Server{ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second, poison: true}
	s.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sc := w.(interface{ Scratch() *any }).Scratch()
		if *sc != nil {
			t.Errorf("%s: the scratch slot holds %v, want nil: a poisoned state was reused", r.URL.Path, *sc)
		}
		p := &poisonCount{}
		*sc = p
		keep <- leaked{r: r, w: w, scratch: p}
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = w.Write([]byte("ok"))
	})
	addr := serveOn(t, s)
	heads := []string{
		"GET /none HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /length HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc",
		"POST /chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
	}
	nc, br := dialServer(t, addr)
	for i, h := range heads {
		if _, err := io.WriteString(nc, h); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "ok" {
			t.Fatalf("request %d: body %q", i, body)
		}
		l := <-keep
		// The state is poisoned a moment after its answer went out; the
		// scratch's poisoning comes last, so once it is seen the rest is.
		waitPoisoned(t, l)
		if l.r.Method != PoisonMethod || !strings.Contains(l.r.URL.Path, PoisonMethod) {
			t.Errorf("request %d: a kept request reads %s %s, want %s", i, l.r.Method, l.r.URL.Path, PoisonMethod)
		}
		if n := l.scratch.poisoned.Load(); n != 1 {
			t.Errorf("request %d: scratch poisoned %d times, want 1", i, n)
		}
		if err := panics(func() { _, _ = l.w.Write([]byte("late")) }); err == nil {
			t.Errorf("request %d: a kept ResponseWriter's Write did not panic", i)
		}
	}
}

// waitPoisoned waits (bounded) until the server has poisoned l's state:
// the client sees the answer a moment before the server's goroutine puts
// the state back.
func waitPoisoned(t *testing.T, l leaked) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; {
		if l.scratch.poisoned.Load() > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the state was not poisoned within 5 s of its answer")
		}
		time.Sleep(time.Millisecond)
	}
}

// panics runs f and returns what it panicked with as an error (nil: none).
func panics(f func()) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%v", v)
		}
	}()
	f()
	return nil
}

// TestStateReused: outside -race, a connection's requests are served from
// recycled states: the handler finds the scratch it left in an earlier
// request (the pool is per processor, and emptied at each collection, so
// not every time).
func TestStateReused(t *testing.T) {
	if raceBuild {
		t.Skip("-race builds poison finished states instead of reusing them (TestPoisonedAfterReturn)")
	}
	var reused atomic.Int32
	_, addr := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sc := w.(interface{ Scratch() *any }).Scratch()
		if *sc != nil {
			reused.Add(1)
		}
		*sc = r.URL.Path
		_, _ = w.Write([]byte("ok"))
	}))
	heads := make([]string, 50)
	for i := range heads {
		heads[i] = "GET /" + fmt.Sprint(i) + " HTTP/1.1\r\nHost: x\r\n\r\n"
	}
	roundTrips(t, addr, heads, false)
	if reused.Load() == 0 {
		t.Errorf("no request of %d found an earlier one's scratch: states are not reused", len(heads))
	}
}
