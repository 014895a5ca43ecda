package h1

import (
	"context"
	"testing"
	"time"
)

func TestConnCtxAfterDone(t *testing.T) {
	for _, tc := range []struct {
		name     string
		register int  // AfterDone calls (more than the slots fall back to context.AfterFunc)
		stop     int  // how many of them are stopped before the end
		endFirst bool // the context ends before registering
	}{
		{name: "stopped before the end", register: 1, stop: 1},
		{name: "runs at the end", register: 1},
		{name: "every slot and a fallback run", register: afterDoneSlots + 1},
		{name: "every slot and a fallback stopped", register: afterDoneSlots + 1, stop: afterDoneSlots + 1},
		{name: "registered after the end", register: 1, endFirst: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newConnCtx(context.Background())
			if tc.endFirst {
				x.end()
			}
			ran := make(chan int, tc.register)
			stops := make([]func() bool, tc.register)
			for i := range stops {
				stops[i] = x.AfterDone(func() {
					if x.Err() == nil {
						t.Error("ran before the context ended")
					}
					ran <- i
				})
			}
			for i := range tc.stop {
				if !stops[i]() {
					t.Errorf("stop %d before the end = false, want true", i)
				}
			}
			x.end()
			want := tc.register - tc.stop
			for range want {
				select {
				case <-ran:
				case <-time.After(5 * time.Second):
					t.Fatalf("fewer than %d functions ran", want)
				}
			}
			select {
			case i := <-ran:
				t.Fatalf("stopped function %d ran", i)
			case <-time.After(20 * time.Millisecond):
			}
			for i := tc.stop; i < tc.register; i++ {
				if stops[i]() {
					t.Errorf("stop %d after the end = true, want false", i)
				}
			}
		})
	}
}

// A slot freed by stop carries the next registration.
func TestConnCtxAfterDoneReusesSlots(t *testing.T) {
	x := newConnCtx(context.Background())
	for range 3 * afterDoneSlots {
		if !x.AfterDone(func() { t.Error("stopped function ran") })() {
			t.Fatal("stop = false before the end")
		}
	}
	if n := testing.AllocsPerRun(100, func() { x.AfterDone(func() {})() }); n != 0 {
		t.Errorf("AfterDone + stop allocate %v times, want 0", n)
	}
	x.end()
}

// TestConnCtxIsEnded: the flag finishRequest reads follows the context's
// error, end after end.
func TestConnCtxIsEnded(t *testing.T) {
	x := newConnCtx(context.Background())
	for _, step := range []struct {
		name string
		end  bool
		want bool
	}{
		{"open", false, false},
		{"ended", true, true},
		{"ended twice", true, true},
	} {
		if step.end {
			x.end()
		}
		if got := x.isEnded(); got != step.want || got != (x.Err() != nil) {
			t.Errorf("%s: isEnded %v, Err %v; want %v", step.name, got, x.Err(), step.want)
		}
	}
}
