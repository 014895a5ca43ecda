//go:build linux

package h1

import (
	"testing"
	"time"
)

// TestWatcherDueOnce: due hands out a connection whose request has run
// past watchAfter once (it is registered then, for as long as it is open),
// and none whose request is newer or that is between requests; a
// connection removed is never handed out.
func TestWatcherDueOnce(t *testing.T) {
	w := &Watcher{conns: map[uint64]*conn{}, unwatched: map[uint64]*conn{}}
	now := time.Now()
	for _, tc := range []struct {
		name    string
		busy    time.Time // zero: between requests
		removed bool
		want    bool
	}{
		{"long request", now.Add(-2 * watchAfter), false, true},
		{"new request", now.Add(watchAfter), false, false},
		{"between requests", time.Time{}, false, false},
		{"long request, closed", now.Add(-2 * watchAfter), true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &conn{}
			if !tc.busy.IsZero() {
				c.busySince.Store(tc.busy.UnixNano())
			}
			w.add(c)
			if tc.removed {
				w.remove(c)
			}
			got := w.due(nil)
			if handed := len(got) == 1 && got[0] == c; handed != tc.want || len(got) > 1 {
				t.Fatalf("due handed out %d connections (this one: %v), want this one: %v", len(got), handed, tc.want)
			}
			if again := w.due(nil); len(again) != 0 {
				t.Fatalf("a second due handed out %d connections, want none", len(again))
			}
			w.remove(c)
		})
	}
}

// TestWatcherClose: Close ends the watcher's goroutine (Close waits for
// it) whether its wait is parked or not begun yet, and a second Close
// returns too.
func TestWatcherClose(t *testing.T) {
	for range 20 {
		w := NewWatcher()
		if w == nil {
			t.Skip("no epoll")
		}
		closed := make(chan struct{})
		go func() {
			defer close(closed)
			w.Close()
			w.Close()
		}()
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Fatal("Close did not end the watcher's goroutine")
		}
	}
}
