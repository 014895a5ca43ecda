package window

import (
	"container/list"
	"context"
	"errors"
	"sync"
	"time"
)

// ErrShed is Acquire's error when no slot freed within the wait bound.
var ErrShed = errors.New("admission window full")

// Window bounds the requests in flight on one endpoint. A nil *Window
// admits everything (no window configured). Its limit may change while
// requests hold slots (SetLimit: a window learned from the engine): a
// smaller limit never takes a slot back, it only admits no one until the
// requests in flight drop below it. Safe for concurrent use.
type Window struct {
	mu       sync.Mutex
	limit    int        // 0: admit all (a window whose size is not known yet)
	inFlight int        // slots held
	waiters  *list.List // of chan struct{}: FIFO; a slot is handed over by closing it
	// done is release bound once: Acquire hands it out, and a method value
	// made per call would allocate on every admitted request. SetLimit
	// never replaces the window, so one binding serves every limit.
	done func()
}

// New returns a window of limit slots; limit <= 0 returns nil (no window).
func New(limit int) *Window {
	if limit <= 0 {
		return nil
	}
	return NewResizable(limit)
}

// NewResizable returns a window of limit slots whose limit SetLimit may
// change later; limit <= 0 admits every request until a limit is set.
func NewResizable(limit int) *Window {
	w := &Window{limit: max(limit, 0), waiters: list.New()}
	w.done = w.release
	return w
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
	w.mu.Lock()
	if w.roomLocked() && w.waiters.Len() == 0 {
		w.inFlight++
		w.mu.Unlock()
		return w.done, r, nil
	}
	r.Waited = true
	if wait <= 0 {
		w.mu.Unlock()
		return nil, r, ErrShed
	}
	ready := make(chan struct{})
	el := w.waiters.PushBack(ready)
	w.mu.Unlock()

	start := time.Now()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ready:
		r.Wait = time.Since(start)
		return w.done, r, nil
	case <-t.C:
		err = ErrShed
	case <-ctx.Done():
		err = ctx.Err()
	}
	r.Wait = time.Since(start)
	w.mu.Lock()
	select {
	case <-ready: // handed a slot as the bound passed: give it back
		w.inFlight--
		w.handOffLocked()
	default:
		w.waiters.Remove(el)
	}
	w.mu.Unlock()
	return nil, r, err
}

// roomLocked reports whether one more request may take a slot.
func (w *Window) roomLocked() bool { return w.limit == 0 || w.inFlight < w.limit }

// handOffLocked gives free slots to the longest waiters.
func (w *Window) handOffLocked() {
	for w.waiters.Len() > 0 && w.roomLocked() {
		ready := w.waiters.Remove(w.waiters.Front()).(chan struct{})
		w.inFlight++
		close(ready)
	}
}

func (w *Window) release() {
	w.mu.Lock()
	w.inFlight--
	w.handOffLocked()
	w.mu.Unlock()
}

// SetLimit changes the window's size (limit <= 0: admit all). Requests in
// flight keep their slots; a larger limit admits waiters at once.
func (w *Window) SetLimit(limit int) {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.limit = max(limit, 0)
	w.handOffLocked()
	w.mu.Unlock()
}

// InFlight is how many requests hold a slot now.
func (w *Window) InFlight() int {
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.inFlight
}

// Waiting is how many requests wait for a slot now.
func (w *Window) Waiting() int {
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.waiters.Len()
}

// Limit is the window's size (0: no window, or one not known yet).
func (w *Window) Limit() int {
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.limit
}

// Full reports whether the window admits no one now: it has a limit and
// that many requests (or more, after a shrink) hold slots.
func (w *Window) Full() bool {
	if w == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.roomLocked()
}
