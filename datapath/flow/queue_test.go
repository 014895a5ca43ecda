package flow

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fleet is a stand-in for endpoints with windows: free slots, taken by a
// successful try.
type fleet struct {
	q     *Queue
	free  atomic.Int32
	order chan string
	errs  chan error
	wg    sync.WaitGroup
}

func newFleet(t *testing.T, o Options) *fleet {
	t.Helper()
	f := &fleet{q: New(o, nil), order: make(chan string, 64), errs: make(chan error, 64)}
	f.q.recheck = time.Hour // no spontaneous grants: the test drives every one
	t.Cleanup(f.wg.Wait)
	return f
}

func (f *fleet) try() bool {
	for {
		n := f.free.Load()
		if n <= 0 {
			return false
		}
		if f.free.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// submit queues one request named name and waits until it is queued, so
// the submissions of a test have a fixed arrival order.
func (f *fleet) submit(t *testing.T, ctx context.Context, name string, tk Ticket) {
	t.Helper()
	before := f.q.Len()
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		if _, err := f.q.Wait(ctx, tk, f.try); err != nil {
			f.errs <- fmt.Errorf("%s: %w", name, err)
			return
		}
		f.order <- name
	}()
	deadline := time.Now().Add(2 * time.Second)
	for f.q.Len() == before {
		select {
		case err := <-f.errs: // shed on arrival (or displaced another: Len unchanged)
			f.errs <- err
			return
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never queued", name)
		}
		time.Sleep(time.Millisecond)
	}
}

// drain frees one slot at a time and returns who got each.
func (f *fleet) drain(t *testing.T, n int) []string {
	t.Helper()
	var got []string
	for range n {
		f.free.Add(1)
		f.q.Release()
		select {
		case name := <-f.order:
			got = append(got, name)
		case err := <-f.errs:
			t.Fatalf("unexpected: %v", err)
		case <-time.After(2 * time.Second):
			t.Fatalf("no dispatch after a release; got %v", got)
		}
	}
	return got
}

func TestDispatchOrder(t *testing.T) {
	soon := time.Now().Add(time.Hour)
	type sub struct {
		name string
		tk   Ticket
	}
	low, std, high := Ticket{Class: ClassLow}, Ticket{Class: ClassStandard}, Ticket{Class: ClassHigh}
	ten := func(tk Ticket, tenant string, w float64) Ticket { tk.Tenant, tk.Weight = tenant, w; return tk }
	due := func(tk Ticket, in time.Duration) Ticket { tk.Deadline = soon.Add(in); return tk }
	tests := []struct {
		name     string
		minShare float64
		subs     []sub
		want     string
	}{
		{"higher class first", 0, []sub{{"l", low}, {"s", std}, {"h", high}}, "h s l"},
		{"one tenant: arrival order", 0, []sub{{"a1", std}, {"a2", std}, {"a3", std}}, "a1 a2 a3"},
		{"tenants alternate: a burst waits behind its own", 0, []sub{
			{"b1", ten(low, "big", 1)}, {"b2", ten(low, "big", 1)}, {"b3", ten(low, "big", 1)}, {"b4", ten(low, "big", 1)},
			{"s1", ten(low, "small", 1)}, {"s2", ten(low, "small", 1)},
		}, "b1 s1 b2 s2 b3 b4"},
		{"weights split the class", 0, []sub{
			{"a1", ten(std, "a", 2)}, {"a2", ten(std, "a", 2)}, {"a3", ten(std, "a", 2)}, {"a4", ten(std, "a", 2)},
			{"b1", ten(std, "b", 1)}, {"b2", ten(std, "b", 1)},
		}, "a1 a2 b1 a3 a4 b2"},
		{"earliest deadline first within a tenant", 0, []sub{{"none", std}, {"late", due(std, 10*time.Second)}, {"early", due(std, 5*time.Second)}}, "early late none"},
		{"deadline does not cross classes", 0, []sub{{"lowdue", due(low, time.Second)}, {"high", high}}, "high lowdue"},
		{"minimum share of the lowest class", 0.5, []sub{{"h1", high}, {"h2", high}, {"h3", high}, {"h4", high}, {"l1", low}}, "h1 l1 h2 h3 h4"},
		{"no share: strict priority", 0, []sub{{"h1", high}, {"h2", high}, {"l1", low}}, "h1 h2 l1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions()
			o.MaxWait = time.Minute
			o.MinShare = tc.minShare
			f := newFleet(t, o)
			for _, s := range tc.subs {
				f.submit(t, context.Background(), s.name, s.tk)
			}
			if got := strings.Join(f.drain(t, len(tc.subs)), " "); got != tc.want {
				t.Fatalf("dispatch order %q, want %q", got, tc.want)
			}
			if n := f.q.Len(); n != 0 {
				t.Fatalf("%d left queued", n)
			}
		})
	}
}

func TestShed(t *testing.T) {
	past := time.Now().Add(-time.Second)
	tests := []struct {
		name   string
		length int
		queued []Ticket // waiting before the arrival
		arrive Ticket
		// want: the arrival's error reason ("" = queued), and the reason a
		// queued request got ("" = none shed).
		want, displaced string
	}{
		{"queue off", 0, nil, Ticket{}, ReasonQueueFull, ""},
		{"full, same class and tenant", 2, []Ticket{{}, {}}, Ticket{}, ReasonQueueFull, ""},
		{"full: a higher class displaces a lower", 2, []Ticket{{Class: ClassLow}, {Class: ClassHigh}}, Ticket{Class: ClassHigh}, "", ReasonDisplaced},
		{"full: a lower class is shed", 2, []Ticket{{Class: ClassHigh}, {Class: ClassHigh}}, Ticket{Class: ClassLow}, ReasonQueueFull, ""},
		{"full: a small tenant displaces a big one", 3, []Ticket{{Tenant: "big"}, {Tenant: "big"}, {Tenant: "big"}}, Ticket{Tenant: "small"}, "", ReasonDisplaced},
		{"full: tenants even, the arrival is shed", 2, []Ticket{{Tenant: "a"}, {Tenant: "b"}}, Ticket{Tenant: "c"}, ReasonQueueFull, ""},
		{"deadline already passed", 8, nil, Ticket{Deadline: past}, ReasonDeadline, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions()
			o.QueueLength = tc.length
			o.MaxWait = time.Minute
			f := newFleet(t, o)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			for i, tk := range tc.queued {
				f.submit(t, ctx, fmt.Sprint("q", i), tk)
			}
			// An arrival that queues is ended by its context once queued.
			actx, acancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer acancel()
			_, err := f.q.Wait(actx, tc.arrive, f.try)
			if reason(err) != tc.want {
				t.Fatalf("arrival: %v, want reason %q", err, tc.want)
			}
			var se *ShedError
			if errors.As(err, &se) && (se.RetryAfter < time.Second || se.RetryAfter%time.Second != 0) {
				t.Fatalf("Retry-After %v: want whole seconds ≥ 1", se.RetryAfter)
			}
			got := ""
			select {
			case e := <-f.errs:
				got = reason(e)
			case <-time.After(50 * time.Millisecond):
			}
			if got != tc.displaced {
				t.Fatalf("queued request shed with %q, want %q", got, tc.displaced)
			}
			cancel() // the rest leave
		})
	}
}

func reason(err error) string {
	var se *ShedError
	if errors.As(err, &se) {
		return se.Reason
	}
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return err.Error()
	}
	return ""
}

func TestWaitBounds(t *testing.T) {
	tests := []struct {
		name     string
		maxWait  time.Duration
		deadline time.Duration // from now; 0: none
		want     string
	}{
		{"wait bound", 60 * time.Millisecond, 0, ReasonTimeout},
		{"deadline before the bound", time.Minute, 60 * time.Millisecond, ReasonDeadline},
		{"bound before the deadline", 60 * time.Millisecond, time.Minute, ReasonTimeout},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions()
			o.MaxWait = tc.maxWait
			q := New(o, nil)
			tk := Ticket{}
			if tc.deadline > 0 {
				tk.Deadline = time.Now().Add(tc.deadline)
			}
			start := time.Now()
			r, err := q.Wait(context.Background(), tk, func() bool { return false })
			took := time.Since(start)
			if reason(err) != tc.want || !r.Queued {
				t.Fatalf("Wait = %+v, %v; want queued then %q", r, err, tc.want)
			}
			// Not before the 60 ms bound, and long before the minute the
			// other bound would give (the rest is a loaded machine's slack).
			if took < 60*time.Millisecond || took > 30*time.Second {
				t.Fatalf("shed after %v, want about 60ms", took)
			}
			if q.Len() != 0 {
				t.Fatal("a shed request kept its place")
			}
		})
	}
}

// TestClientLeavesQueue: a request whose client goes away leaves the queue
// at once, and the next release goes to the one behind it.
func TestClientLeavesQueue(t *testing.T) {
	o := DefaultOptions()
	o.MaxWait = time.Minute
	f := newFleet(t, o)
	gone, leave := context.WithCancel(context.Background())
	f.submit(t, gone, "gone", Ticket{Class: ClassHigh})
	f.submit(t, context.Background(), "stays", Ticket{Class: ClassLow})
	leave()
	select {
	case err := <-f.errs:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("left with %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("a cancelled request stayed queued")
	}
	if n := f.q.Len(); n != 1 {
		t.Fatalf("queue length %d after the client left, want 1", n)
	}
	if got := f.drain(t, 1); got[0] != "stays" {
		t.Fatalf("next dispatch %v", got)
	}
}

// TestGrantPassedOn: a request granted a slot that leaves before using it
// hands the slot to the next in line.
func TestGrantPassedOn(t *testing.T) {
	o := DefaultOptions()
	o.MaxWait = time.Minute
	q := New(o, nil)
	q.recheck = time.Hour
	q.mu.Lock()
	a, _ := q.enqueueLocked(Ticket{Tenant: "a"}, time.Now())
	b, _ := q.enqueueLocked(Ticket{Tenant: "b"}, time.Now())
	q.grantLocked() // a is granted …
	q.mu.Unlock()
	q.leave(a) // … and leaves without taking it
	select {
	case <-b.ch:
	default:
		t.Fatal("the slot granted to a leaving request was not passed on")
	}
	if q.Len() != 0 {
		t.Fatalf("len %d", q.Len())
	}
}

// TestRecheck: with no release reported, the head still gets to try.
func TestRecheck(t *testing.T) {
	o := DefaultOptions()
	o.MaxWait = 5 * time.Second
	q := New(o, nil)
	q.recheck = 20 * time.Millisecond
	var room atomic.Bool
	time.AfterFunc(50*time.Millisecond, func() { room.Store(true) })
	r, err := q.Wait(context.Background(), Ticket{}, room.Load)
	if err != nil || !r.Queued || r.Wait > time.Second {
		t.Fatalf("Wait = %+v, %v", r, err)
	}
}

// TestConcurrent (run with -race): many requests over few slots; never
// more in flight than slots, every request dispatched or shed, and the
// queue empty at the end.
func TestConcurrent(t *testing.T) {
	const slots, workers = 4, 200
	o := DefaultOptions()
	o.QueueLength = 64
	o.MaxWait = 2 * time.Second
	var gaugeMu sync.Mutex
	lens := map[Class]int{}
	q := New(o, func(c Class, n int) { gaugeMu.Lock(); lens[c] = n; gaugeMu.Unlock() })
	var free atomic.Int32
	free.Store(slots)
	var inFlight, peak, done, shed, left atomic.Int32
	try := func() bool {
		for {
			n := free.Load()
			if n <= 0 {
				return false
			}
			if free.CompareAndSwap(n, n-1) {
				return true
			}
		}
	}
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if i%10 == 0 {
				time.AfterFunc(time.Duration(i%7)*time.Millisecond, cancel)
			}
			tk := Ticket{Class: Class(i % NumClasses), Tenant: fmt.Sprint("t", i%3)}
			if i%5 == 0 {
				tk.Deadline = time.Now().Add(time.Duration(i) * time.Millisecond)
			}
			_, err := q.Wait(ctx, tk, try)
			switch {
			case err == nil:
				n := inFlight.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(time.Millisecond)
				inFlight.Add(-1)
				free.Add(1)
				q.Release()
				done.Add(1)
			case errors.Is(err, context.Canceled):
				left.Add(1)
			default:
				shed.Add(1)
			}
		}()
	}
	wg.Wait()
	if peak.Load() > slots {
		t.Fatalf("peak %d in flight over %d slots", peak.Load(), slots)
	}
	if done.Load()+shed.Load()+left.Load() != workers || done.Load() == 0 {
		t.Fatalf("done %d shed %d left %d of %d", done.Load(), shed.Load(), left.Load(), workers)
	}
	if q.Len() != 0 {
		t.Fatalf("%d still queued", q.Len())
	}
	gaugeMu.Lock()
	defer gaugeMu.Unlock()
	for c, n := range lens {
		if n != 0 {
			t.Fatalf("gauge of class %v ends at %d", c, n)
		}
	}
}

// TestDeadlineEstimate: a request is shed at arrival when the requests
// that would go before it (fair queuing's order, not the queue's length)
// already reach past its deadline.
func TestDeadlineEstimate(t *testing.T) {
	tests := []struct {
		name   string
		arrive Ticket
		want   string // "" queued, else the shed reason
	}{
		{"heavy tenant behind its own backlog", Ticket{Tenant: "big", Class: ClassStandard}, ReasonDeadline},
		{"light tenant goes before the backlog", Ticket{Tenant: "small", Class: ClassStandard}, ""},
		{"higher class goes first", Ticket{Tenant: "big", Class: ClassHigh}, ""},
		{"lower class waits behind everyone", Ticket{Tenant: "other", Class: ClassLow}, ReasonDeadline},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := New(DefaultOptions(), nil)
			q.recheck = time.Hour
			now := time.Now()
			q.mu.Lock()
			defer q.mu.Unlock()
			for range 10 {
				if _, err := q.enqueueLocked(Ticket{Tenant: "big", Class: ClassStandard}, now); err != nil {
					t.Fatal(err)
				}
			}
			q.interval, q.lastGrant = 100*time.Millisecond, now // ten dispatches a second
			tk := tc.arrive
			tk.Deadline = now.Add(500 * time.Millisecond)
			_, err := q.enqueueLocked(tk, now)
			if reason(err) != tc.want {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

// TestDeadlineLead: a request with a deadline leaves the queue the
// observed dispatch-to-first-byte lead before it (it could not make it
// later), but never more than half its budget early.
func TestDeadlineLead(t *testing.T) {
	tests := []struct {
		name     string
		lead     time.Duration
		deadline time.Duration
		shedAt   time.Duration
	}{
		{"no lead observed", 0, 400 * time.Millisecond, 400 * time.Millisecond},
		{"lead", 150 * time.Millisecond, 400 * time.Millisecond, 250 * time.Millisecond},
		{"lead capped at half the budget", 5 * time.Second, 400 * time.Millisecond, 200 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions()
			o.MaxWait = time.Minute
			q := New(o, nil)
			q.recheck = time.Hour
			q.ObserveLead(tc.lead)
			start := time.Now()
			_, err := q.Wait(context.Background(), Ticket{Deadline: start.Add(tc.deadline)}, func() bool { return false })
			took := time.Since(start)
			if reason(err) != ReasonDeadline {
				t.Fatalf("got %v", err)
			}
			if took < tc.shedAt || took > tc.shedAt+time.Second {
				t.Fatalf("shed after %v, want about %v", took, tc.shedAt)
			}
		})
	}
}
