package upstream

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/fakeengine"
)

// pooled sends n concurrent requests to e so n connections end up idle in
// c's pool for that endpoint.
func pooled(t *testing.T, c *Client, e *fakeengine.Server, n int) {
	t.Helper()
	var bodies []io.ReadCloser
	for range n { // held open together: n distinct connections
		resp, err := c.Send(context.Background(), Leg{Endpoint: endpoint(e.Addr()), Method: http.MethodPost, Path: "/v1/completions", Body: []byte(completionBody)})
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, resp.Body)
	}
	for _, b := range bodies {
		_, _ = io.Copy(io.Discard, b)
		b.Close()
	}
}

func TestIdleConnectionsAreReaped(t *testing.T) {
	a, err := fakeengine.Start(fakeengine.Options{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := fakeengine.Start(fakeengine.Options{Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c := New(time.Second, 8, nil)
	defer c.CloseIdle()

	pooled(t, c, a, 3)
	pooled(t, c, b, 2)
	if got := c.idleCount(); got != 5 {
		t.Fatalf("pooled %d connections, want 5", got)
	}
	c.CloseEndpoint(a.Addr()) // a left every rule
	if got := c.idleCount(); got != 2 {
		t.Fatalf("after closing a's pool: %d idle, want b's 2", got)
	}

	// Pooled before the first tick: kept through reapTicks-1 ticks (under
	// ReapIdle's after), closed at the next.
	cases := []struct {
		name  string
		ticks int
		left  int
	}{
		{"fresh connections stay", reapTicks - 1, 2},
		{"idle past the timeout go", 1, 0},
	}
	for _, tc := range cases {
		for range tc.ticks {
			if !c.reap() {
				t.Fatalf("%s: reap reports the client closed", tc.name)
			}
		}
		if got := c.idleCount(); got != tc.left {
			t.Fatalf("%s: %d idle, want %d", tc.name, got, tc.left)
		}
	}
	c.mu.Lock()
	pools := len(c.eps)
	c.mu.Unlock()
	if pools != 0 {
		t.Fatalf("%d emptied pools still held", pools)
	}

	// The background reaper does the same on its own.
	pooled(t, c, b, 2)
	c.ReapIdle(20 * time.Millisecond)
	for deadline := time.Now().Add(5 * time.Second); c.idleCount() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("ReapIdle left %d idle connections", c.idleCount())
		}
	}
}

// TestReapIdleStopsAtCloseIdle checks that the reaper's goroutine ends with
// CloseIdle, not at its next tick (half the idle timeout: minutes with the
// defaults), so a closed runtime leaves none behind.
func TestReapIdleStopsAtCloseIdle(t *testing.T) {
	c := New(time.Second, 4, nil)
	c.ReapIdle(time.Hour)
	if !reaperRunning() {
		t.Fatal("no reaper goroutine found: the wait below would pass whatever CloseIdle does")
	}
	c.CloseIdle()
	for range 500 { // ≤ 5 s
		if !reaperRunning() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the reaper's goroutine outlived CloseIdle")
}

// reaperRunning reports whether a ReapIdle goroutine runs.
func reaperRunning() bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return bytes.Contains(buf, []byte("upstream.(*Client).ReapIdle.func"))
}
