package respclock

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestEventEnds(t *testing.T) {
	tests := []struct {
		name   string
		b      string
		prevNL bool
		want   int
	}{
		{"one event", "data: {}\n\n", false, 1},
		{"two events", "data: a\n\ndata: b\n\n", false, 2},
		{"crlf", "data: a\r\n\r\ndata: b\r\n\r\n", false, 2},
		{"unfinished", "data: a\n", false, 0},
		{"ends across writes", "\ndata: b", true, 1},
		{"crlf across writes", "\r\ndata: b", true, 1},
		{"no boundary across writes", "data: b\n", true, 0},
		{"multi-line event", "event: x\ndata: a\ndata: b\n\n", false, 1},
		{"blank line alone", "\n\n", false, 1},
		{"blank line alone after a line", "\n\n", true, 1},
		{"crlf then lf after a line", "\r\n\n", true, 1},
		{"three line feeds", "\n\n\n", false, 1},
		{"one event after a line", "data: b\n\n", true, 1},
		{"crlf event", "data: a\r\n\r\n", false, 1},
	}
	for _, tt := range tests {
		if got := eventEnds([]byte(tt.b), tt.prevNL); got != tt.want {
			t.Errorf("%s: eventEnds(%q, %v) = %d, want %d", tt.name, tt.b, tt.prevNL, got, tt.want)
		}
	}
}

type gapRec []time.Duration

func (g *gapRec) Gap(d time.Duration) { *g = append(*g, d) }

// eventStream is a Writer over a recorder that answered 200 with content
// type ct, recording its gaps.
func eventStream(ct string) (*httptest.ResponseRecorder, *Writer, *gapRec) {
	rec := httptest.NewRecorder()
	rec.Header().Set("Content-Type", ct)
	gaps := &gapRec{}
	w := &Writer{Gaps: gaps}
	w.Reset(rec)
	w.WriteHeader(200)
	return rec, w, gaps
}

// TestStreamTiming: a stream's first byte, events and gaps are recorded as
// written, with the engine's chunking (an event split across writes).
func TestStreamTiming(t *testing.T) {
	rec, w, gp := eventStream("text/event-stream; charset=utf-8")
	writes := []string{"data: {\"a\":1}\n", "\n", "data: {\"a\":2}\n\ndata: [DONE]", "\n\n"}
	for _, s := range writes {
		time.Sleep(5 * time.Millisecond)
		if _, err := w.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	gaps := *gp
	if w.Status() != 200 || !w.Streamed() || w.Events() != 3 || w.Bytes() != int64(len(strings.Join(writes, ""))) {
		t.Fatalf("status %d streamed %v events %d bytes %d", w.Status(), w.Streamed(), w.Events(), w.Bytes())
	}
	if len(gaps) != 2 {
		t.Fatalf("gaps %v: want 2 (three event-completing writes)", gaps)
	}
	for _, g := range gaps {
		if g < 4*time.Millisecond {
			t.Fatalf("gap %v shorter than the writes' spacing", g)
		}
	}
	if span := w.EventSpan(); span < 10*time.Millisecond {
		t.Fatalf("event span %v: want at least two write spacings", span)
	}
	if rec.Body.String() != strings.Join(writes, "") {
		t.Fatalf("body changed: %q", rec.Body.String())
	}
}

// TestPlainBody: a JSON answer has a first byte but no events, and an
// implicit 200 is recorded without changing what reaches the client.
func TestPlainBody(t *testing.T) {
	rec := httptest.NewRecorder()
	var w Writer
	w.Reset(rec)
	_, _ = w.Write([]byte("data: x\n\n"))
	if w.Status() != 200 || w.Streamed() || w.Events() != 0 || w.First().IsZero() {
		t.Fatalf("status %d streamed %v events %d first %v", w.Status(), w.Streamed(), w.Events(), w.First())
	}
	if rec.Code != 200 {
		t.Fatalf("client status %d", rec.Code)
	}
	rc := http.NewResponseController(&w)
	if err := rc.Flush(); err != nil {
		t.Fatalf("flush through the wrapper: %v", err)
	}
}

// TestWriteAtTimes: WriteAt records the first byte, the events and the
// gaps at the caller's clock readings, exactly, and an event split across
// writes is timed by the write that completes it.
func TestWriteAtTimes(t *testing.T) {
	_, w, gp := eventStream("text/event-stream")
	t0 := time.Unix(1000, 0)
	for _, wr := range []struct {
		s  string
		at time.Duration
	}{
		{"data: 1\n\n", 0},
		{"data: 2\n", 7 * time.Millisecond},
		{"\n", 9 * time.Millisecond},
		{"data: 3\n\n", 30 * time.Millisecond},
	} {
		if _, err := w.WriteAt([]byte(wr.s), t0.Add(wr.at)); err != nil {
			t.Fatal(err)
		}
	}
	if !w.First().Equal(t0) || w.Events() != 3 || w.EventSpan() != 30*time.Millisecond {
		t.Fatalf("first %v events %d span %v; want %v, 3, 30ms", w.First(), w.Events(), w.EventSpan(), t0)
	}
	gaps := *gp
	if want := (gapRec{9 * time.Millisecond, 21 * time.Millisecond}); len(gaps) != 2 || gaps[0] != want[0] || gaps[1] != want[1] {
		t.Fatalf("gaps %v, want %v", gaps, want)
	}
}

// TestNowFromStart: with Start set, a reading is Start plus the monotonic
// time since, so it falls between two ordinary readings around it, and a
// body's first byte is timed by it; without Start it is an ordinary
// reading. Reset clears Start.
func TestNowFromStart(t *testing.T) {
	var w Writer
	w.Reset(httptest.NewRecorder())
	start := time.Now().Add(-time.Second) // a request that began a second ago
	w.Start = &start
	before := time.Now()
	now := w.Now()
	after := time.Now()
	if now.Before(before) || now.After(after) {
		t.Errorf("Now %v, want between %v and %v", now, before, after)
	}
	if _, err := w.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if f := w.First(); f.Before(after) || f.Sub(start) < time.Second {
		t.Errorf("first byte at %v, want after %v and a second after Start", f, after)
	}
	w.Reset(httptest.NewRecorder())
	if w.Start != nil {
		t.Errorf("Start %v after Reset, want nil", *w.Start)
	}
	if n := w.Now(); n.Before(after) {
		t.Errorf("Now without Start %v, want after %v", n, after)
	}
}

// TestWriteHeaderOf: the caller's word on the Content-Type stands for
// WriteHeader's own look, for the first final status only, and the status
// reaches the client either way.
func TestWriteHeaderOf(t *testing.T) {
	for _, tc := range []struct {
		name       string
		calls      []int // statuses, in order
		sse        bool
		wantStatus int
		wantSSE    bool
	}{
		{"plain", []int{200}, false, 200, false},
		{"event stream", []int{200}, true, 200, true},
		{"interim first", []int{103, 200}, true, 200, true},
		{"error page", []int{502}, false, 502, false},
		{"second final ignored", []int{200, 500}, true, 200, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			var w Writer
			w.Reset(rec)
			for _, code := range tc.calls {
				w.WriteHeaderOf(code, tc.sse)
			}
			if w.Status() != tc.wantStatus || w.Streamed() != tc.wantSSE {
				t.Fatalf("status %d streamed %v, want %d %v", w.Status(), w.Streamed(), tc.wantStatus, tc.wantSSE)
			}
			if rec.Code != tc.calls[0] && rec.Code != tc.wantStatus {
				t.Fatalf("client status %d", rec.Code)
			}
		})
	}
}

// TestNowSince: the reading and its time since Start agree exactly with
// Time.Sub; without a Start the time is zero.
func TestNowSince(t *testing.T) {
	past := time.Now().Add(-time.Second)
	for _, tc := range []struct {
		name  string
		start *time.Time
	}{
		{"with a start", &past},
		{"no start", nil},
		{"a zero start", new(time.Time)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := Writer{Start: tc.start}
			now, d := w.NowSince()
			if tc.start == nil || tc.start.IsZero() {
				if d != 0 || now.IsZero() {
					t.Fatalf("NowSince = %v, %v; want a reading and zero", now, d)
				}
				return
			}
			if want := now.Sub(*tc.start); d != want || d < time.Second {
				t.Fatalf("NowSince's time %v, want %v (now less the start)", d, want)
			}
		})
	}
}

// discard is a ResponseWriter that takes every write whole.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

type gapCount int

func (g *gapCount) Gap(time.Duration) { *g++ }

// BenchmarkWriteAtEvent is the clock's work per relayed event: one event
// per write, 20 ms apart, as the SSE relay's Emit writes them.
func BenchmarkWriteAtEvent(b *testing.B) {
	ev := []byte(`data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" tok","finish_reason":null}]}` + "\n\n")
	var times [1024]time.Time
	t0 := time.Now()
	for i := range times {
		times[i] = t0.Add(time.Duration(i) * 20 * time.Millisecond)
	}
	var g gapCount
	w := &Writer{Gaps: &g}
	w.Reset(&discard{h: http.Header{}})
	w.WriteHeaderOf(http.StatusOK, true)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := w.WriteAt(ev, times[i&1023]); err != nil {
			b.Fatal(err)
		}
	}
}

// refEventEnds is eventEnds without its one-event shortcut: the loop alone.
func refEventEnds(b []byte, prevNL bool) int {
	k := 0
	if prevNL {
		switch {
		case b[0] == '\n':
			k, b = 1, b[1:]
		case len(b) > 1 && b[0] == '\r' && b[1] == '\n':
			k, b = 1, b[2:]
		}
	}
	for len(b) > 0 {
		i := strings.IndexByte(string(b), '\n')
		if i < 0 {
			break
		}
		b = b[i+1:]
		switch {
		case len(b) > 0 && b[0] == '\n':
			k++
			b = b[1:]
		case len(b) > 1 && b[0] == '\r' && b[1] == '\n':
			k++
			b = b[2:]
		}
	}
	return k
}

// TestEventEndsShortcut: eventEnds counts as the loop alone does, for
// every write of up to seven bytes of line feeds, carriage returns and
// text, after a line feed or not.
func TestEventEndsShortcut(t *testing.T) {
	alphabet := []byte{'\n', '\r', 'a'}
	var b []byte
	var walk func(n int)
	walk = func(n int) {
		if len(b) > 0 {
			for _, prevNL := range []bool{false, true} {
				if got, want := eventEnds(b, prevNL), refEventEnds(b, prevNL); got != want {
					t.Fatalf("eventEnds(%q, %v) = %d, the loop says %d", b, prevNL, got, want)
				}
			}
		}
		if n == 0 {
			return
		}
		for _, c := range alphabet {
			b = append(b, c)
			walk(n - 1)
			b = b[:len(b)-1]
		}
	}
	walk(7)
}

// FuzzEventEnds holds eventEnds to the loop alone on any write.
func FuzzEventEnds(f *testing.F) {
	for _, s := range []string{"data: {}\n\n", "\r\n\n", "\n\n\n", "a\r\n\r\nb\n\n", "\n"} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, b []byte, prevNL bool) {
		if len(b) == 0 {
			return // WriteAt never counts an empty write
		}
		if got, want := eventEnds(b, prevNL), refEventEnds(b, prevNL); got != want {
			t.Fatalf("eventEnds(%q, %v) = %d, the loop says %d", b, prevNL, got, want)
		}
	})
}

// TestWriteInMatchesWriteAt: WriteIn at times since Start times the
// first byte, the events, the gaps and the span exactly as WriteAt at
// Start plus those times, with and without a monotonic Start.
func TestWriteInMatchesWriteAt(t *testing.T) {
	writes := []struct {
		s  string
		at time.Duration // since Start
	}{
		{"data: 1\n\n", 3 * time.Millisecond},
		{"data: 2\n", 7 * time.Millisecond},
		{"\n", 9 * time.Millisecond},
		{"data: 3\n\ndata: 4\n\n", 30 * time.Millisecond},
		{"data: 5\n\n", 30 * time.Millisecond},
	}
	for _, tc := range []struct {
		name  string
		start time.Time
	}{
		{"monotonic start", time.Now()},
		{"wall start", time.Unix(1000, 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, at, atGaps := eventStream("text/event-stream")
			_, in, inGaps := eventStream("text/event-stream")
			start := tc.start
			at.Start, in.Start = &start, &start
			if !in.HasStart() {
				t.Fatal("HasStart false with Start set")
			}
			for _, wr := range writes {
				if _, err := at.WriteAt([]byte(wr.s), start.Add(wr.at)); err != nil {
					t.Fatal(err)
				}
				if _, err := in.WriteIn([]byte(wr.s), wr.at); err != nil {
					t.Fatal(err)
				}
			}
			if !in.First().Equal(at.First()) || in.Events() != at.Events() || in.EventSpan() != at.EventSpan() {
				t.Fatalf("WriteIn: first %v events %d span %v; WriteAt: %v, %d, %v",
					in.First(), in.Events(), in.EventSpan(), at.First(), at.Events(), at.EventSpan())
			}
			if in.EventSpan() != 27*time.Millisecond || fmt.Sprint(*inGaps) != fmt.Sprint(*atGaps) || len(*inGaps) != 3 {
				t.Fatalf("span %v gaps %v; WriteAt's gaps %v", in.EventSpan(), *inGaps, *atGaps)
			}
		})
	}
	var w Writer
	w.Reset(httptest.NewRecorder())
	if w.HasStart() {
		t.Fatal("HasStart true without a Start")
	}
}

// BenchmarkWriteInEvent is BenchmarkWriteAtEvent through WriteIn, the SSE
// relay's path (sseStream.Emit with a timing wrapper): each event timed
// by its time since Start.
func BenchmarkWriteInEvent(b *testing.B) {
	ev := []byte(`data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" tok","finish_reason":null}]}` + "\n\n")
	var g gapCount
	w := &Writer{Gaps: &g}
	w.Reset(&discard{h: http.Header{}})
	start := time.Now()
	w.Start = &start
	w.WriteHeaderOf(http.StatusOK, true)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := w.WriteIn(ev, time.Duration(i&1023)*20*time.Millisecond); err != nil {
			b.Fatal(err)
		}
	}
}
