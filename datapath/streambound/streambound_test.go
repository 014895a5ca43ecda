package streambound

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/infergate/infergate/datapath/sockio"
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

// refBound is Next as it was before hold: the whole test on every call.
type refBound struct {
	idle      time.Duration
	end, last time.Time
}

func (b *refBound) next(now time.Time) (time.Time, bool) {
	d := now.Add(b.idle)
	if !b.end.IsZero() && b.end.Before(d) {
		d = b.end
	}
	if !b.last.IsZero() && (b.last.Equal(b.end) || d.Sub(b.last) <= b.idle/slackDiv) {
		return b.last, false
	}
	b.last = d
	return d, true
}

// TestNextHold: Next with its hold answers as the whole test does, call
// by call, for events closer and farther apart than the slack, around
// the cap, and after Clear; the client's deadline is set exactly on the
// moves.
func TestNextHold(t *testing.T) {
	t0 := time.Now() // with a monotonic reading, as the relay's
	const idle = time.Second
	slack := idle / slackDiv
	for _, tc := range []struct {
		name  string
		end   time.Duration // after t0; 0: no cap
		steps []time.Duration
	}{
		{"every event within the slack", 0, []time.Duration{0, 1, slack / 2, slack, slack}},
		{"at the slack's edge", 0, []time.Duration{0, slack, 1, slack - 1, 2}},
		{"past the slack", 0, []time.Duration{0, slack + 1, slack + 1, 3 * slack, 0}},
		{"events 20 ms apart", 0, []time.Duration{0, 20e6, 20e6, 20e6, 20e6, 20e6, 20e6}},
		{"a long silence", 0, []time.Duration{0, 1, 10 * idle, 1}},
		{"cap far", time.Hour, []time.Duration{0, slack, slack, 1}},
		{"cap reached", idle + slack/2, []time.Duration{0, slack / 4, slack / 4, slack, idle, time.Hour}},
		{"cap within the slack", idle + slack/2, []time.Duration{0, slack / 2, slack/2 - 1, 1}},
		{"cap before the idle bound", idle / 2, []time.Duration{0, 1, idle, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &deadlineWriter{ResponseWriter: httptest.NewRecorder()}
			b := Bound{Idle: idle}
			ref := refBound{idle: idle}
			if tc.end > 0 {
				b.End, ref.end = t0.Add(tc.end), t0.Add(tc.end)
			}
			b.BindClient(w)
			now := t0
			moves := 0
			for round := range 2 { // the second after Clear
				for i, step := range tc.steps {
					now = now.Add(step)
					got, moved := b.Next(now)
					want, wantMoved := ref.next(now)
					if !got.Equal(want) || moved != wantMoved {
						t.Fatalf("round %d, call %d (+%v): Next = %v, %v; want %v, %v", round, i, now.Sub(t0), got.Sub(t0), moved, want.Sub(t0), wantMoved)
					}
					if moved {
						moves++
					}
				}
				b.Clear()
				ref.last = time.Time{}
				moves++ // Clear's zero deadline
			}
			if len(w.set) != moves {
				t.Fatalf("%d write deadlines set, want %d", len(w.set), moves)
			}
		})
	}
}

// TestNoticeResetsHold: after Notice a Next looks again (it does not
// answer from a hold worked out before the notice).
func TestNoticeResetsHold(t *testing.T) {
	b := Bound{Idle: time.Hour}
	now := time.Now()
	b.Next(now)
	b.Notice()
	if b.hold != sockio.NoDeadline {
		t.Fatalf("hold %v after Notice, want zero", b.hold)
	}
	if d, _ := b.NextAt(sockio.MonoOf(now)); d != b.last {
		t.Fatalf("Next after Notice = %v, want the notice's %v", d, b.last)
	}
}

// TestHoldAfterFirstMove: the first move leaves hold zero (a small
// answer's bound is asked once); the next call works it out, or moves.
func TestHoldAfterFirstMove(t *testing.T) {
	t0 := time.Now()
	const idle = time.Second
	for _, tc := range []struct {
		name      string
		second    time.Duration // after t0
		wantMoved bool
		wantHold  bool // hold set after the second call
	}{
		{"within the slack", idle / slackDiv, false, true},
		{"past the slack", idle/slackDiv + 1, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := Bound{Idle: idle}
			if _, moved := b.Next(t0); !moved || b.hold != sockio.NoDeadline {
				t.Fatalf("first Next: moved %v, hold %v; want a move and a zero hold", moved, b.hold)
			}
			if _, moved := b.Next(t0.Add(tc.second)); moved != tc.wantMoved || (b.hold == sockio.NoDeadline) == tc.wantHold {
				t.Fatalf("second Next: moved %v, hold %v; want moved %v, hold set %v", moved, b.hold, tc.wantMoved, tc.wantHold)
			}
		})
	}
}

// monoWriter takes write deadlines as a Mono, as h1's response does.
type monoWriter struct {
	deadlineWriter
	at []sockio.Mono
}

func (w *monoWriter) SetWriteDeadlineAt(m sockio.Mono) error {
	w.at = append(w.at, m)
	return nil
}

// TestNextAtMatchesNext: NextAt on a reading's Mono moves the deadlines
// to the moment Next on the reading does, a Mono-taking client writer is
// given that moment as a Mono (and nothing through SetWriteDeadline), and
// Clear gives it NoDeadline.
func TestNextAtMatchesNext(t *testing.T) {
	t0 := time.Now()
	for _, tc := range []struct {
		name string
		end  time.Time
		at   []time.Duration // after t0
	}{
		{"no cap", time.Time{}, []time.Duration{0, time.Millisecond, time.Second}},
		{"cap in the past", t0.Add(-time.Second), []time.Duration{0, time.Second}},
		{"cap far off", t0.Add(1000 * 24 * time.Hour), []time.Duration{0, 2 * time.Second}},
		{"readings before the first", time.Time{}, []time.Duration{0, -time.Second, 3 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref := Bound{Idle: time.Second, End: tc.end}
			b := Bound{Idle: time.Second, End: tc.end}
			w := &monoWriter{deadlineWriter: deadlineWriter{ResponseWriter: httptest.NewRecorder()}}
			b.BindClient(w)
			for i, at := range tc.at {
				want, wantMoved := ref.Next(t0.Add(at))
				got, moved := b.NextAt(sockio.MonoOf(t0.Add(at)))
				if !got.Time().Equal(want) || moved != wantMoved {
					t.Fatalf("call %d: NextAt = %v, %v; Next %v, %v", i, got.Time().Sub(t0), moved, want.Sub(t0), wantMoved)
				}
				if moved && w.at[len(w.at)-1] != got {
					t.Fatalf("call %d: client deadline %d, want %d", i, w.at[len(w.at)-1], got)
				}
			}
			b.Clear()
			if len(w.set) != 0 || w.at[len(w.at)-1] != sockio.NoDeadline {
				t.Fatalf("set %v through SetWriteDeadline, last Mono %d", w.set, w.at[len(w.at)-1])
			}
		})
	}
}
