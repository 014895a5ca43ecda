package upstream

import (
	"io"
	"testing"
	"time"
)

// TestWaitReadable checks that WaitReadable returns at once while bytes are
// buffered or the body is done, and otherwise blocks until the engine sends
// (not before), after which a read does not wait.
func TestWaitReadable(t *testing.T) {
	const gap = 120 * time.Millisecond
	ep := streamEngine(t, []time.Duration{gap, gap})
	c := New(time.Second, 4, nil)
	defer c.CloseIdle()
	resp, err := c.Send(t.Context(), Leg{Endpoint: ep, Method: "GET", Path: "/v1/stream"})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	w := resp.Body.(ReadWaiter)
	buf := make([]byte, 256)
	for event := 0; ; event++ {
		start := time.Now()
		w.WaitReadable()
		waited := time.Since(start)
		start = time.Now()
		n, err := resp.Body.Read(buf)
		read := time.Since(start)
		if err == io.EOF {
			break
		}
		if err != nil || n == 0 {
			t.Fatalf("event %d: read %d bytes, %v", event, n, err)
		}
		if event > 0 && waited < gap/2 {
			t.Errorf("event %d: WaitReadable returned after %v, before the engine sent (gap %v)", event, waited, gap)
		}
		if read > gap/2 {
			t.Errorf("event %d: the read after WaitReadable took %v", event, read)
		}
		if event > 3 {
			t.Fatalf("more events than the engine sent")
		}
	}
	start := time.Now()
	w.WaitReadable() // the body is done: nothing to wait for
	if d := time.Since(start); d > gap/2 {
		t.Errorf("WaitReadable on a finished body took %v", d)
	}
}
