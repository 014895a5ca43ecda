package upstream

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/infergate/infergate/spec"
)

// streamEngine answers every request on its connections with a chunked
// stream: one event, then after each gap in gaps another; a negative gap
// stops sending without ending the stream (the engine goes silent).
func streamEngine(t *testing.T, gaps []time.Duration) spec.Endpoint {
	t.Helper()
	l := serveEach(t, func(nc net.Conn) {
		defer nc.Close()
		br := bufio.NewReader(nc)
		for { // the request head; the test sends no body
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			if line == "\r\n" {
				break
			}
		}
		event := func(k int) string { d := fmt.Sprintf("data: %d\n\n", k); return fmt.Sprintf("%x\r\n%s\r\n", len(d), d) }
		_, _ = io.WriteString(nc, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"+event(0))
		for k, g := range gaps {
			if g < 0 {
				_, _ = io.Copy(io.Discard, nc) // silent until the client goes
				return
			}
			time.Sleep(g)
			if _, err := io.WriteString(nc, event(k+1)); err != nil {
				return
			}
		}
		_, _ = io.WriteString(nc, "0\r\n\r\n")
	})
	ap := netip.MustParseAddrPort(l.Addr().String())
	return spec.Endpoint{ID: ap.String(), Addr: ap, Weight: 1}
}

// TestLazyReadDeadline checks the relay's idle bound on an engine stream as
// the lazy deadlines implement it: moved forward per read it never cuts a
// stream whose events keep coming (though the socket's first deadline
// passes mid-stream), it still ends a silent one at the bound, a nearer
// bound takes effect at once, and a cancelled request is not held by a
// bound set further out.
func TestLazyReadDeadline(t *testing.T) {
	// The bound leaves a gap of 360 ms for a loaded box to deliver an event
	// late (150 ms failed once under a 1,000-stream benchmark); twelve gaps
	// still outlast the socket's first deadline.
	const bound = 400 * time.Millisecond
	gap := 40 * time.Millisecond
	keepComing := make([]time.Duration, 12)
	for i := range keepComing {
		keepComing[i] = gap
	}
	for _, tc := range []lazyReadCase{
		{name: "events keep coming", gaps: keepComing,
			per: func(int) time.Duration { return bound }},
		{name: "silent past the bound", gaps: []time.Duration{gap, -1},
			per: func(int) time.Duration { return bound }, want: os.ErrDeadlineExceeded, within: [2]time.Duration{bound - 20*time.Millisecond, 2 * time.Second}},
		{name: "nearer bound", gaps: []time.Duration{gap, -1},
			per: func(read int) time.Duration {
				if read < 2 {
					return 10 * time.Second
				}
				return 50 * time.Millisecond
			}, want: os.ErrDeadlineExceeded, within: [2]time.Duration{30 * time.Millisecond, 2 * time.Second}},
		{name: "cancelled under a far bound", gaps: []time.Duration{-1},
			per: func(int) time.Duration { return 10 * time.Second }, cancel: 100 * time.Millisecond, want: context.Canceled, within: [2]time.Duration{50 * time.Millisecond, 2 * time.Second}},
	} {
		for _, wait := range []bool{false, true} {
			name := tc.name
			if wait {
				name += ", waiting for readiness" // the relay's way for SSE (waitread.go)
			}
			t.Run(name, func(t *testing.T) { tc.run(t, wait) })
		}
	}
}

// lazyReadCase is one TestLazyReadDeadline case.
type lazyReadCase struct {
	name   string
	gaps   []time.Duration
	per    func(read int) time.Duration // the bound set before each read
	cancel time.Duration                // > 0: cancel the request this long after the head
	want   error                        // nil: the stream ends cleanly
	within [2]time.Duration             // the read error arrives this long after the last bytes
}

// run runs the case; wait calls WaitReadable before every read.
func (tc lazyReadCase) run(t *testing.T, wait bool) {
	ep := streamEngine(t, tc.gaps)
	c := New(time.Second, 4, nil)
	defer c.CloseIdle()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	resp, err := c.Send(ctx, Leg{Endpoint: ep, Method: "GET", Path: "/v1/stream"})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if tc.cancel > 0 {
		time.AfterFunc(tc.cancel, cancel)
	}
	bb := resp.Body.(BoundedBody)
	buf := make([]byte, 256)
	last := time.Now()
	for read := 0; ; read++ {
		bb.SetReadDeadline(time.Now().Add(tc.per(read)))
		if wait {
			resp.Body.(ReadWaiter).WaitReadable()
		}
		n, err := resp.Body.Read(buf)
		if n > 0 {
			last = time.Now()
		}
		if err == nil {
			continue
		}
		if err == io.EOF {
			err = nil
		}
		if tc.want == nil {
			if err != nil {
				t.Fatalf("read %d: %v", read, err)
			}
			return
		}
		if tc.want == context.Canceled {
			if ctx.Err() == nil {
				t.Fatalf("read %d ended (%v) before the cancel", read, err)
			}
		} else if !errors.Is(err, tc.want) {
			t.Fatalf("read %d: %v, want %v", read, err, tc.want)
		}
		if d := time.Since(last); d < tc.within[0] || d > tc.within[1] {
			t.Fatalf("read %d failed %v after the last bytes, want within %v", read, d, tc.within)
		}
		return
	}
}
