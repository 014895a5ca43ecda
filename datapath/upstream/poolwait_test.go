package upstream

import (
	"errors"
	"os"
	"testing"
	"time"
)

// TestEndpointConnCapWaitEndsAtHeaderWait: a request waiting at the cap
// gives up when its HeaderWait (the first-byte bound) passes, even though
// its context lives on, with a *PoolWaitError that says so and nothing
// sent; the slot accounting stays intact for the next request.
func TestEndpointConnCapWaitEndsAtHeaderWait(t *testing.T) {
	eng, u, ep, first := capOneBusy(t)

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
	eng.checkSlotKept(t, u, first, Leg{Endpoint: ep, Path: "/", Body: []byte("{}"), HeaderWait: wait})
}
