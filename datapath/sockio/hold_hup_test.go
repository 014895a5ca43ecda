package sockio

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// TestHoldHangUpWithLastBytes: the peer's FIN is queued with its last
// bytes before Hold reads them, so the readiness that reports the bytes
// also reports the FIN and no later one comes. A step that waits once
// Drained must still reach the end of stream: through the hang-up
// watcher, or without one by reading on to EAGAIN after a short read. A
// step that waited for good would end at the 5 s read deadline instead.
func TestHoldHangUpWithLastBytes(t *testing.T) {
	if !rawIO {
		t.Skip("Hold runs no step without raw calls (-race, non-Linux)")
	}
	tests := []struct {
		name  string
		watch bool
	}{
		{"hang-up watcher", true},
		{"no watcher", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, peer := pair(t)
			var w HupWatcher
			if tc.watch {
				c.WatchHangUp(&w)
				defer c.StopWatchingHangUp()
			}
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.WriteString(peer, "ab"); err != nil {
				t.Fatal(err)
			}
			if err := peer.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			var got []byte
			var end error
			buf := make([]byte, 64)
			err := c.Hold(func() bool {
				for {
					n, err := c.Read(buf)
					got = append(got, buf[:n]...)
					if err != nil && !errors.Is(err, ErrWouldBlock) {
						end = err
						return false
					}
					if c.Drained() {
						return true
					}
				}
			})
			if err != nil || !errors.Is(end, io.EOF) || string(got) != "ab" {
				t.Fatalf("Hold: %v, end %v, read %q; want the end of stream after %q", err, end, got, "ab")
			}
		})
	}
}
