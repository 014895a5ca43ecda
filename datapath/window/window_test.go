package window

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// hold takes n slots of w without waiting and returns their releases.
func hold(t *testing.T, w *Window, n int) []func() {
	t.Helper()
	rel := make([]func(), 0, n)
	for range n {
		r, _, err := w.Acquire(context.Background(), 0)
		if err != nil {
			t.Fatal(err)
		}
		rel = append(rel, r)
	}
	return rel
}

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
			rel := hold(t, w, tc.held)
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

// TestSetLimit: resizing keeps the slots in flight, a shrink admits no one
// until they drop below the new size, a growth hands slots to waiters, and
// a zero limit (size not known yet) admits everyone.
func TestSetLimit(t *testing.T) {
	tests := []struct {
		name       string
		from, to   int
		held       int  // slots taken before the resize
		releases   int  // held slots released after the resize
		wantAdmit  bool // a request without wait is admitted after that
		wantFull   bool
		wantFlight int // in flight after the releases (before the new request)
	}{
		{"grow admits", 2, 4, 2, 0, true, false, 2},
		{"shrink keeps in-flight, admits none", 4, 2, 4, 0, false, true, 4},
		{"shrink: still over after one release", 4, 2, 4, 1, false, true, 3},
		{"shrink: room once below", 4, 2, 4, 3, true, false, 1},
		{"unknown size admits all", 0, 0, 50, 0, true, false, 50},
		{"learned size applies to unknown window", 0, 3, 3, 0, false, true, 3},
		{"size forgotten admits all", 2, 0, 2, 0, true, false, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := NewResizable(tc.from)
			rel := hold(t, w, tc.held)
			w.SetLimit(tc.to)
			for i := range tc.releases {
				rel[i]()
			}
			if w.InFlight() != tc.wantFlight || w.Full() != tc.wantFull || w.Limit() != tc.to {
				t.Fatalf("in flight %d full %v limit %d, want %d %v %d", w.InFlight(), w.Full(), w.Limit(), tc.wantFlight, tc.wantFull, tc.to)
			}
			_, _, err := w.Acquire(context.Background(), 0)
			if (err == nil) != tc.wantAdmit {
				t.Fatalf("Acquire after resize: %v, want admitted=%v", err, tc.wantAdmit)
			}
		})
	}
}

// TestGrowWakesWaiters: requests waiting at a full window are admitted as
// soon as the window grows, oldest first.
func TestGrowWakesWaiters(t *testing.T) {
	w := New(1)
	if _, _, err := w.Acquire(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	order := make(chan int, 2)
	for i := range 2 {
		go func() {
			if _, _, err := w.Acquire(context.Background(), 5*time.Second); err == nil {
				order <- i
			}
		}()
		for w.Waiting() != i+1 { // queue them in a known order
			time.Sleep(time.Millisecond)
		}
	}
	w.SetLimit(2)
	if got := <-order; got != 0 {
		t.Fatalf("first admitted waiter %d, want the oldest (0)", got)
	}
	select {
	case i := <-order:
		t.Fatalf("waiter %d admitted over the limit", i)
	case <-time.After(20 * time.Millisecond):
	}
	w.SetLimit(3)
	if got := <-order; got != 1 {
		t.Fatalf("second waiter %d", got)
	}
	if w.InFlight() != 3 || w.Waiting() != 0 {
		t.Fatalf("in flight %d waiting %d", w.InFlight(), w.Waiting())
	}
}

// TestResizeUnderContention: while the limit moves between 1 and 4 under
// 32 contending requests, the window never admits more than the largest
// limit it had, a shed waiter leaves no slot held, and at the end every
// slot is back.
func TestResizeUnderContention(t *testing.T) {
	const workers, maxLimit = 32, 4
	w := NewResizable(2)
	var mu sync.Mutex
	cur, peak := 0, 0
	stop := make(chan struct{})
	var resizer sync.WaitGroup
	resizer.Add(1)
	go func() {
		defer resizer.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			w.SetLimit(1 + i%maxLimit)
			time.Sleep(200 * time.Microsecond)
		}
	}()
	var wg sync.WaitGroup
	for k := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 20 {
				wait := time.Second
				if (k+j)%5 == 0 {
					wait = 50 * time.Microsecond // some give up: their slot must not leak
				}
				release, _, err := w.Acquire(context.Background(), wait)
				if err != nil {
					continue
				}
				mu.Lock()
				cur++
				peak = max(peak, cur)
				mu.Unlock()
				time.Sleep(50 * time.Microsecond)
				mu.Lock()
				cur--
				mu.Unlock()
				release()
			}
		}()
	}
	wg.Wait()
	close(stop)
	resizer.Wait()
	if peak > maxLimit || w.InFlight() != 0 || w.Waiting() != 0 {
		t.Fatalf("peak %d (largest limit %d), in flight %d, waiting %d at the end", peak, maxLimit, w.InFlight(), w.Waiting())
	}
}

// BenchmarkAcquireRelease is the per-request cost of a window with room
// (what every request of a windowed rule pays), under parallel callers.
func BenchmarkAcquireRelease(b *testing.B) {
	w := New(1 << 16)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			release, _, err := w.Acquire(context.Background(), 0)
			if err != nil {
				b.Fatal(err)
			}
			_ = w.Full()
			release()
		}
	})
}
