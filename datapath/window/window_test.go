package window

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestNilWindowAdmitsAll(t *testing.T) {
	var w *Window = New(0)
	for range 100 {
		release, r, err := w.Acquire(context.Background(), 0)
		if err != nil || r.Waited {
			t.Fatalf("nil window: %v %+v", err, r)
		}
		release()
	}
	if w.Limit() != 0 || w.InFlight() != 0 || w.Waiting() != 0 {
		t.Fatal("nil window reports state")
	}
}

func TestAcquire(t *testing.T) {
	tests := []struct {
		name    string
		limit   int
		held    int // slots taken before the call
		wait    time.Duration
		freeIn  time.Duration // a held slot is released after this (0: never)
		cancel  bool
		want    error
		waited  bool
		minWait time.Duration
	}{
		{"free slot", 2, 1, 0, 0, false, nil, false, 0},
		{"full, no wait: shed at once", 2, 2, 0, 0, false, ErrShed, true, 0},
		{"full, bound passes: shed", 1, 1, 30 * time.Millisecond, 0, false, ErrShed, true, 30 * time.Millisecond},
		{"full, slot frees in time", 1, 1, 2 * time.Second, 20 * time.Millisecond, false, nil, true, 20 * time.Millisecond},
		{"full, caller gives up", 1, 1, 2 * time.Second, 0, true, context.Canceled, true, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := New(tc.limit)
			var rel []func()
			for range tc.held {
				r, _, err := w.Acquire(context.Background(), 0)
				if err != nil {
					t.Fatal(err)
				}
				rel = append(rel, r)
			}
			if tc.freeIn > 0 {
				time.AfterFunc(tc.freeIn, rel[0])
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancel {
				time.AfterFunc(20*time.Millisecond, cancel)
			}
			release, r, err := w.Acquire(ctx, tc.wait)
			if !errors.Is(err, tc.want) || r.Waited != tc.waited || r.Wait < tc.minWait {
				t.Fatalf("Acquire = %v %+v, want %v waited=%v wait>=%v", err, r, tc.want, tc.waited, tc.minWait)
			}
			if err == nil {
				if w.InFlight() != min(tc.held+1, tc.limit) && tc.freeIn == 0 {
					t.Fatalf("in flight %d", w.InFlight())
				}
				release()
			} else if release != nil {
				t.Fatal("release returned with an error")
			}
			if w.Waiting() != 0 {
				t.Fatalf("waiting %d after Acquire returned", w.Waiting())
			}
		})
	}
}

// TestNeverOverLimit: under contention the window never admits more than
// its limit at once, and every request is admitted or shed.
func TestNeverOverLimit(t *testing.T) {
	const limit, workers = 3, 32
	w := New(limit)
	var mu sync.Mutex
	cur, peak, admitted, shed := 0, 0, 0, 0
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			release, _, err := w.Acquire(context.Background(), 5*time.Second)
			if err != nil {
				mu.Lock()
				shed++
				mu.Unlock()
				return
			}
			mu.Lock()
			cur++
			admitted++
			peak = max(peak, cur)
			mu.Unlock()
			time.Sleep(time.Millisecond)
			mu.Lock()
			cur--
			mu.Unlock()
			release()
		}()
	}
	wg.Wait()
	if peak > limit || admitted+shed != workers || admitted != workers {
		t.Fatalf("peak %d (limit %d), admitted %d, shed %d", peak, limit, admitted, shed)
	}
}
