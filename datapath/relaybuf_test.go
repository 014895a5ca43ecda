package datapath

import (
	"sync"
	"testing"
)

// countingWaiter counts WaitReadable calls and what the relay held then.
type countingWaiter struct {
	rb        *relayBuf
	waits     int
	heldWhile int // waits during which the relay still held a buffer
}

func (w *countingWaiter) WaitReadable() {
	w.waits++
	if w.rb.bp != nil {
		w.heldWhile++
	}
}

// TestRelayBufIdle checks that a relay with a waiter gives its buffer back
// before every wait and borrows one again for the next read, and that one
// without a waiter keeps the same buffer throughout.
func TestRelayBufIdle(t *testing.T) {
	for _, tc := range []struct {
		name      string
		waiter    bool
		wantWaits int
	}{
		{name: "stream with a waiter", waiter: true, wantWaits: 3},
		{name: "no waiter", waiter: false, wantWaits: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pool sync.Pool
			borrowed := 0
			pool.New = func() any { borrowed++; b := make([]byte, 64); return &b }
			rb := relayBuf{pool: &pool}
			w := &countingWaiter{rb: &rb}
			if tc.waiter {
				rb.wait = w
			}
			first := &rb.get()[0]
			for range 3 {
				rb.idle()
				if tc.waiter && rb.bp != nil {
					t.Fatal("idle kept the buffer")
				}
				if b := rb.get(); len(b) != 64 {
					t.Fatalf("get returned %d bytes", len(b))
				}
			}
			if !tc.waiter && &rb.get()[0] != first {
				t.Error("a relay without a waiter changed buffers")
			}
			rb.release()
			if rb.bp != nil {
				t.Error("release kept the buffer")
			}
			if w.waits != tc.wantWaits || w.heldWhile != 0 {
				t.Errorf("waits %d (held a buffer in %d), want %d, none held", w.waits, w.heldWhile, tc.wantWaits)
			}
			if borrowed == 0 {
				t.Error("no buffer came from the pool")
			}
		})
	}
}
