package upstream

import (
	"errors"
	"os"
	"testing"
	"time"
)

// TestEndpointConnCapWaitEndsAtHeaderWait: a request waiting at the cap
// gives up while the engine's share of its HeaderWait (the first-byte
// bound) is still left, even though its context lives on, with a
// *PoolWaitError that says so and nothing sent; the slot accounting stays
// intact for the next request.
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
	if limit := wait - wait/engineShare; took < limit || took > wait+time.Second {
		t.Fatalf("the wait ended after %v, want about %v (its HeaderWait %v less the engine's share)", took, limit, wait)
	}
	if NotSent(err) {
		t.Fatal("a pool wait is reported as a dial failure (would be retried elsewhere)")
	}
	eng.checkSlotKept(t, u, first, Leg{Endpoint: ep, Path: "/", Body: []byte("{}"), HeaderWait: wait})
}

// TestLateSlotIsNotSent: a connection that comes free when less than the
// engine's share of the first-byte bound is left is not used: the request
// fails at the pool (not sent, so no engine timeout is blamed and no warm
// connection is cut), and the engine never sees it. Before engineShare
// the slot freed at 90 % of the bound was taken and the request sent.
func TestLateSlotIsNotSent(t *testing.T) {
	eng, u, ep, first := capOneBusy(t)

	const wait = time.Second
	freed := time.AfterFunc(wait*9/10, func() { close(eng.release) }) // never earlier than the wait's own start
	defer freed.Stop()
	_, err := u.Send(t.Context(), Leg{Endpoint: ep, Path: "/", Body: []byte("{}"), HeaderWait: wait})
	var pw *PoolWaitError
	if !errors.As(err, &pw) || !pw.TimedOut {
		t.Fatalf("request whose slot came free at 90 %% of its bound: %v, want a timed-out *PoolWaitError", err)
	}
	if ferr := <-first; ferr != nil {
		t.Fatal(ferr)
	}
	if n := eng.requests.Load(); n != 1 {
		t.Fatalf("the engine received %d requests, want 1 (the late one not sent)", n)
	}
}
