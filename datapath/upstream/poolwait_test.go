package upstream

import (
	"errors"
	"io"
	"os"
	"testing"
	"time"
)

// TestEndpointConnCapWaitEndsAtHeaderWait: a request waiting at the cap
// gives up when its HeaderWait (the first-byte bound) passes, even though
// its context lives on, with a *PoolWaitError that says so and nothing
// sent; the slot accounting stays intact for the next request.
func TestEndpointConnCapWaitEndsAtHeaderWait(t *testing.T) {
	eng := startHoldEngine(t)
	u := NewWithOptions(time.Second, 64, Options{MaxConnsPerEndpoint: 1}, nil)
	defer u.CloseIdle()
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

	const wait = 150 * time.Millisecond
	start := time.Now()
	_, err := u.Send(t.Context(), Leg{Endpoint: ep, Path: "/", Body: []byte("{}"), HeaderWait: wait})
	took := time.Since(start)
	var pw *PoolWaitError
	if !errors.As(err, &pw) || !pw.TimedOut || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("waiting request: %v, want a timed-out *PoolWaitError", err)
	}
	if took < wait || took > wait+time.Second {
		t.Fatalf("the wait ended after %v, want about its HeaderWait %v", took, wait)
	}
	if NotSent(err) {
		t.Fatal("a pool wait is reported as a dial failure (would be retried elsewhere)")
	}
	close(eng.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	resp, err := u.Send(t.Context(), Leg{Endpoint: ep, Path: "/", Body: []byte("{}"), HeaderWait: wait})
	if err != nil {
		t.Fatalf("after the wait gave up: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if n := eng.accepted.Load(); n != 1 {
		t.Fatalf("engine accepted %d connections, want 1 (reused)", n)
	}
}
