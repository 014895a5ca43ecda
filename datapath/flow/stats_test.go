package flow

import (
	"context"
	"maps"
	"testing"
	"time"
)

func TestStats(t *testing.T) {
	o := DefaultOptions()
	o.QueueLength = 3
	o.MaxWait = time.Minute
	f := newFleet(t, o)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	if st := f.q.Stats(time.Now()); st.Queued != 0 || st.OldestWait != 0 || len(st.Shed) != 0 {
		t.Fatalf("empty queue: %+v", st)
	}
	start := time.Now()
	for _, tk := range []Ticket{{Class: ClassLow}, {Class: ClassHigh}, {Class: ClassHigh}} {
		f.submit(t, ctx, "q", tk)
	}
	// Shed on arrival: one by a past deadline, one by a full queue (a low
	// request cannot displace anyone).
	for _, tk := range []Ticket{{Deadline: start.Add(-time.Second)}, {Class: ClassLow}} {
		if _, err := f.q.Wait(ctx, tk, f.try); reason(err) == "" {
			t.Fatalf("arrival %+v was not shed", tk)
		}
	}
	now := time.Now().Add(5 * time.Second)
	st := f.q.Stats(now)
	if want := [NumClasses]int{ClassLow: 1, ClassHigh: 2}; st.Queued != 3 || st.ByClass != want {
		t.Fatalf("queued %d by class %v, want 3 and %v", st.Queued, st.ByClass, want)
	}
	if st.OldestWait < 5*time.Second || st.OldestWait > now.Sub(start) {
		t.Fatalf("oldest wait %v, want about 5s (the first arrival's)", st.OldestWait)
	}
	if want := map[string]uint64{ReasonDeadline: 1, ReasonQueueFull: 1}; !maps.Equal(st.Shed, want) {
		t.Fatalf("sheds %v, want %v", st.Shed, want)
	}
	st.Shed[ReasonDeadline] = 99 // a copy: the queue's counts are its own
	f.drain(t, 3)
	st = f.q.Stats(time.Now())
	if st.Queued != 0 || st.OldestWait != 0 || st.Shed[ReasonDeadline] != 1 {
		t.Fatalf("after draining: %+v", st)
	}
}
