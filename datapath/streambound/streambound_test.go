package streambound

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// deadlineWriter records the write deadlines it is given.
type deadlineWriter struct {
	http.ResponseWriter
	set []time.Time
}

func (w *deadlineWriter) SetWriteDeadline(t time.Time) error {
	w.set = append(w.set, t)
	return nil
}

func TestNext(t *testing.T) {
	now := time.Unix(1000, 0)
	moved := now.Add(time.Second)
	for _, tc := range []struct {
		name string
		end  time.Time
		want time.Time
	}{
		{"no cap", time.Time{}, moved},
		{"cap later", now.Add(time.Minute), moved},
		{"cap sooner", now.Add(time.Millisecond), now.Add(time.Millisecond)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &deadlineWriter{ResponseWriter: httptest.NewRecorder()}
			b := Bound{Idle: time.Second, End: tc.end}
			b.BindClient(w)
			if got, ok := b.Next(now); !got.Equal(tc.want) || !ok {
				t.Fatalf("Next = %v, %v, want %v, true", got, ok, tc.want)
			}
			b.Clear()
			if len(w.set) != 2 || !w.set[0].Equal(tc.want) || !w.set[1].IsZero() {
				t.Fatalf("write deadlines %v, want [%v, zero]", w.set, tc.want)
			}
		})
	}
}

// TestNextSlack: the deadlines move only when the one in force would end
// more than Idle/slackDiv before the idle bound from now, and never again
// once at the cap.
func TestNextSlack(t *testing.T) {
	t0 := time.Unix(1000, 0)
	slack := time.Second / slackDiv
	for _, tc := range []struct {
		name      string
		end       time.Time
		at        time.Duration // after t0, the second Next
		wantMoved bool
		want      time.Time
	}{
		{"within the slack", time.Time{}, slack, false, t0.Add(time.Second)},
		{"past the slack", time.Time{}, slack + time.Nanosecond, true, t0.Add(time.Second + slack + time.Nanosecond)},
		{"at the cap", t0.Add(time.Second / 2), time.Hour, false, t0.Add(time.Second / 2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &deadlineWriter{ResponseWriter: httptest.NewRecorder()}
			b := Bound{Idle: time.Second, End: tc.end}
			b.BindClient(w)
			b.Next(t0)
			got, moved := b.Next(t0.Add(tc.at))
			if moved != tc.wantMoved || !got.Equal(tc.want) {
				t.Fatalf("Next = %v, %v, want %v, %v", got, moved, tc.want, tc.wantMoved)
			}
			if sets := 1 + map[bool]int{true: 1}[tc.wantMoved]; len(w.set) != sets {
				t.Fatalf("write deadlines %v, want %d set", w.set, sets)
			}
		})
	}
}

func TestNoClientDeadline(t *testing.T) {
	b := Bound{Idle: time.Second}
	b.BindClient(httptest.NewRecorder()) // a recorder has no write deadline
	b.Clear()
	if b.BindsClient() {
		t.Fatal("bound a writer without a write deadline")
	}
	b.Notice() // nothing to set; must not panic
}

func TestNoticePastTheCap(t *testing.T) {
	w := &deadlineWriter{ResponseWriter: httptest.NewRecorder()}
	b := Bound{Idle: time.Hour, End: time.Now().Add(-time.Second)}
	b.BindClient(w)
	b.Notice()
	if len(w.set) != 1 || !w.set[0].After(time.Now().Add(30*time.Minute)) {
		t.Fatalf("notice deadline %v, want the idle bound past the cap", w.set)
	}
}

// wrapper hides its writer's deadline behind Unwrap, as the datapath's
// response clock does.
type wrapper struct{ http.ResponseWriter }

func (w wrapper) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func TestBindThroughUnwrap(t *testing.T) {
	w := &deadlineWriter{ResponseWriter: httptest.NewRecorder()}
	var b Bound
	b.Idle = time.Second
	b.BindClient(wrapper{wrapper{w}})
	if !b.BindsClient() {
		t.Fatal("no write deadline found through Unwrap")
	}
	b.Next(time.Unix(1000, 0))
	b.Clear()
	if len(w.set) != 2 || !w.set[1].IsZero() {
		t.Fatalf("write deadlines %v, want [set, zero]", w.set)
	}
}

func TestBindAllocatesNothing(t *testing.T) {
	var w http.ResponseWriter = wrapper{&deadlineWriter{ResponseWriter: httptest.NewRecorder()}}
	var b Bound
	if n := testing.AllocsPerRun(100, func() { b.BindClient(w) }); n != 0 {
		t.Fatalf("BindClient: %v allocs, want 0", n)
	}
}
