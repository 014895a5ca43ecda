package upstream

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/infergate/infergate/datapath/sockio"
	"github.com/infergate/infergate/spec"
)

// holdEngine answers every request with 200 "ok" once release is closed,
// and counts the connections it accepted and holds open.
type holdEngine struct {
	ln       net.Listener
	release  chan struct{}
	accepted atomic.Int64
	requests atomic.Int64 // requests the engine received
	inFlight atomic.Int64
	srv      *http.Server
}

func startHoldEngine(t *testing.T) *holdEngine {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &holdEngine{ln: ln, release: make(chan struct{})}
	e.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			e.requests.Add(1)
			e.inFlight.Add(1)
			defer e.inFlight.Add(-1)
			_, _ = io.Copy(io.Discard, r.Body)
			<-e.release
			_, _ = io.WriteString(w, "ok")
		}),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				e.accepted.Add(1)
			}
		},
	}
	go func() { _ = e.srv.Serve(ln) }()
	t.Cleanup(func() { _ = e.srv.Close() })
	return e
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestEndpointConnCap: more concurrent requests than the per-endpoint cap
// open no more engine connections than the cap; the rest wait for a free
// one and are all served.
func TestEndpointConnCap(t *testing.T) {
	const limit, requests = 4, 24
	eng := startHoldEngine(t)
	u := NewWithOptions(time.Second, 64, Options{MaxConnsPerEndpoint: limit}, nil)
	defer u.CloseIdle()
	ep := endpoint(eng.ln.Addr().String())
	var wg sync.WaitGroup
	errs := make(chan error, requests)
	for range requests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := u.Send(t.Context(), Leg{Endpoint: ep, Path: "/v1/completions", Body: []byte(completionBody)})
			if err != nil {
				errs <- err
				return
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 || string(b) != "ok" {
				errs <- errors.New("bad answer: " + resp.Status + " " + string(b))
			}
		}()
	}
	waitUntil(t, "the engine to hold the cap's worth of requests", func() bool { return eng.inFlight.Load() == limit })
	if n := u.OpenConns(ep.ID); n != limit {
		t.Fatalf("open connections %d at the cap, want %d", n, limit)
	}
	close(eng.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := eng.accepted.Load(); n > limit {
		t.Fatalf("engine accepted %d connections, cap %d", n, limit)
	}
}

// TestEndpointConnCapWaitEndsWithContext: a request waiting at the cap
// gives up when its context ends, with nothing sent, and leaves the slot
// accounting intact.
func TestEndpointConnCapWaitEndsWithContext(t *testing.T) {
	eng, u, ep, first := capOneBusy(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := u.Send(ctx, Leg{Endpoint: ep, Path: "/", Body: []byte("{}")})
	var pw *PoolWaitError
	if !errors.As(err, &pw) || !errors.Is(err, context.Canceled) {
		t.Fatalf("waiting request: %v, want a *PoolWaitError for the canceled context", err)
	}
	eng.checkSlotKept(t, u, first, Leg{Endpoint: ep, Path: "/", Body: []byte("{}")})
}

// capOneBusy starts a holding engine behind a client capped at one
// connection per endpoint and sends a first request that holds that
// connection until eng.release is closed; first gets its outcome.
func capOneBusy(t *testing.T) (*holdEngine, *Client, spec.Endpoint, <-chan error) {
	t.Helper()
	eng := startHoldEngine(t)
	u := NewWithOptions(time.Second, 64, Options{MaxConnsPerEndpoint: 1}, nil)
	t.Cleanup(u.CloseIdle)
	ep := endpoint(eng.ln.Addr().String())
	first := make(chan error, 1)
	go func() {
		resp, err := u.Send(t.Context(), Leg{Endpoint: ep, Path: "/", Body: []byte("{}")})
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		first <- err
	}()
	waitUntil(t, "the first request at the engine", func() bool { return eng.inFlight.Load() == 1 })
	return eng, u, ep, first
}

// checkSlotKept releases the first request of capOneBusy and sends leg,
// which must succeed on that one connection, reused: a wait that gave up
// left the slot accounting intact.
func (eng *holdEngine) checkSlotKept(t *testing.T, u *Client, first <-chan error, leg Leg) {
	t.Helper()
	close(eng.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	resp, err := u.Send(t.Context(), leg)
	if err != nil {
		t.Fatalf("after the wait gave up: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if n := eng.accepted.Load(); n != 1 {
		t.Fatalf("engine accepted %d connections, want 1 (reused)", n)
	}
}

// firstReadHook calls hook when the body is first read.
type firstReadHook struct {
	r    io.Reader
	once sync.Once
	hook func()
}

func (f *firstReadHook) Read(p []byte) (int, error) {
	f.once.Do(f.hook)
	return f.r.Read(p)
}

// TestStreamDialsAfterFirstBytes: a streamed body is not dialed for before
// its first bytes arrive (an h2 stream's HEADERS alone hold no engine
// connection); the bytes read first still reach the engine.
func TestStreamDialsAfterFirstBytes(t *testing.T) {
	eng := startHoldEngine(t)
	close(eng.release)
	got := make(chan string, 1)
	eng.srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- string(b)
	})
	u := New(time.Second, 4, nil)
	defer u.CloseIdle()
	var dialed atomic.Bool
	u.dialer.Control = func(string, string, syscall.RawConn) error { dialed.Store(true); return nil }
	var dialedEarly bool
	body := &firstReadHook{r: strings.NewReader(`{"audio":"..."}`), hook: func() { dialedEarly = dialed.Load() }}
	resp, err := u.Send(t.Context(), Leg{Endpoint: endpoint(eng.ln.Addr().String()), Path: "/v1/audio",
		Stream: &BodyStream{R: body, N: -1}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if dialedEarly {
		t.Error("the engine was dialed before the body's first bytes were read")
	}
	if b := <-got; b != `{"audio":"..."}` {
		t.Fatalf("engine got body %q", b)
	}
}

// TestReuseAfterPassedDeadline checks that a pooled connection whose last
// exchange's read bound passed while it sat idle is reused: the bound
// belonged to that exchange and says nothing about the connection.
func TestReuseAfterPassedDeadline(t *testing.T) {
	const bound = 100 * time.Millisecond
	eng := startHoldEngine(t)
	close(eng.release)
	u := New(time.Second, 4, nil)
	t.Cleanup(u.CloseIdle)
	leg := Leg{Endpoint: endpoint(eng.ln.Addr().String()), Path: "/", Body: []byte("{}"), HeaderWait: bound}
	for i := range 2 {
		resp, err := u.Send(t.Context(), leg)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		time.Sleep(2 * bound) // idle past the exchange's bound
	}
	if n := eng.accepted.Load(); n != 1 {
		t.Fatalf("engine accepted %d connections, want 1 (reused)", n)
	}
}

// TestHeaderWaitFrom: Leg.From is the moment HeaderWait counts from;
// NoDeadline is Send's own clock reading.
func TestHeaderWaitFrom(t *testing.T) {
	const wait = 400 * time.Millisecond
	eng := startHoldEngine(t) // silent until the test ends
	t.Cleanup(func() { close(eng.release) })
	for _, c := range []struct {
		name    string
		earlier time.Duration // From is this long before Send; 0: zero From
		min     time.Duration // Send's error comes no sooner
		max     time.Duration // nor later
	}{
		{"zero: Send's clock", 0, wait - 20*time.Millisecond, wait + 300*time.Millisecond},
		{"an earlier reading", 300 * time.Millisecond, 0, wait - 150*time.Millisecond},
	} {
		u := New(time.Second, 4, nil)
		leg := Leg{Endpoint: endpoint(eng.ln.Addr().String()), Path: "/", Body: []byte("{}"), HeaderWait: wait}
		start := time.Now()
		if c.earlier > 0 {
			leg.From = sockio.MonoOf(start.Add(-c.earlier))
		}
		_, err := u.Send(t.Context(), leg)
		took := time.Since(start)
		u.CloseIdle()
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("%s: %v, want a deadline error", c.name, err)
		}
		if took < c.min || took > c.max {
			t.Errorf("%s: failed after %v, want %v to %v", c.name, took, c.min, c.max)
		}
	}
}
