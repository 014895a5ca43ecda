package window

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// ErrShed is Acquire's error when no slot freed within the wait bound.
var ErrShed = errors.New("admission window full")

// Window bounds the requests in flight on one endpoint. A nil *Window
// admits everything (no window configured). Safe for concurrent use.
type Window struct {
	slots   chan struct{} // one token per request in flight
	waiting atomic.Int64
}

// New returns a window of limit slots; limit <= 0 returns nil (no window).
func New(limit int) *Window {
	if limit <= 0 {
		return nil
	}
	return &Window{slots: make(chan struct{}, limit)}
}

// Result says how Acquire admitted a request, for the caller's counters.
type Result struct {
	Waited bool          // no slot was free at once
	Wait   time.Duration // how long it waited (0 when admitted at once)
}

// Acquire takes a slot, waiting up to wait for one (wait <= 0: not at all).
// It returns release, to call exactly once when the request ends, or
// ErrShed when the bound passed, or ctx's error when the caller gave up
// first. release is a no-op for a nil window.
func (w *Window) Acquire(ctx context.Context, wait time.Duration) (release func(), r Result, err error) {
	if w == nil {
		return func() {}, r, nil
	}
	select {
	case w.slots <- struct{}{}:
		return w.release, r, nil
	default:
	}
	r.Waited = true
	if wait <= 0 {
		return nil, r, ErrShed
	}
	w.waiting.Add(1)
	defer w.waiting.Add(-1)
	start := time.Now()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case w.slots <- struct{}{}:
		r.Wait = time.Since(start)
		return w.release, r, nil
	case <-t.C:
		r.Wait = time.Since(start)
		return nil, r, ErrShed
	case <-ctx.Done():
		r.Wait = time.Since(start)
		return nil, r, ctx.Err()
	}
}

func (w *Window) release() { <-w.slots }

// InFlight is how many requests hold a slot now.
func (w *Window) InFlight() int {
	if w == nil {
		return 0
	}
	return len(w.slots)
}

// Waiting is how many requests wait for a slot now.
func (w *Window) Waiting() int {
	if w == nil {
		return 0
	}
	return int(w.waiting.Load())
}

// Limit is the window's size (0: no window).
func (w *Window) Limit() int {
	if w == nil {
		return 0
	}
	return cap(w.slots)
}
