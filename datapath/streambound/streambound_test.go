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
	for _, tc := range []struct {
		name string
		end  time.Time
		want time.Time
	}{
		{"no cap", time.Time{}, now.Add(time.Second)},
		{"cap later", now.Add(time.Minute), now.Add(time.Second)},
		{"cap sooner", now.Add(time.Millisecond), now.Add(time.Millisecond)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &deadlineWriter{ResponseWriter: httptest.NewRecorder()}
			b := Bound{Idle: time.Second, End: tc.end}
			b.BindClient(w)
			if got := b.Next(now); !got.Equal(tc.want) {
				t.Fatalf("Next = %v, want %v", got, tc.want)
			}
			b.Clear()
			if len(w.set) != 2 || !w.set[0].Equal(tc.want) || !w.set[1].IsZero() {
				t.Fatalf("write deadlines %v, want [%v, zero]", w.set, tc.want)
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
