package datapath

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
	"unsafe"

	"github.com/infergate/infergate/datapath/flow"
	"github.com/infergate/infergate/datapath/h1"
	"github.com/infergate/infergate/datapath/sockio"
)

// arrivedRecorder is a ResponseWriter that knows its request's start and
// whether the body was whole then, as h1's does.
type arrivedRecorder struct {
	*httptest.ResponseRecorder
	at    time.Time
	whole bool
}

func (a arrivedRecorder) Arrived() h1.Arrival {
	return h1.Arrival{Start: a.at, BodyWhole: a.whole, LineChecked: a.whole, HopFree: a.whole}
}

// parsedRecorder is an arrivedRecorder that also reports its parser's
// Fields, as h1's writer does.
type parsedRecorder struct {
	arrivedRecorder
	asked *int
}

func (p parsedRecorder) Fields() h1.Fields {
	*p.asked++
	return h1.Fields{}
}

func TestRequestStart(t *testing.T) {
	earlier := time.Now().Add(-time.Second)
	for _, c := range []struct {
		name  string
		w     http.ResponseWriter
		clock bool // the clock is read: a time within the call
		want  time.Time
		whole bool
	}{
		{"net/http's writer", httptest.NewRecorder(), true, time.Time{}, false},
		{"arrived whole", arrivedRecorder{httptest.NewRecorder(), earlier, true}, false, earlier, true},
		{"arrived, body to read", arrivedRecorder{httptest.NewRecorder(), earlier, false}, false, earlier, false},
		{"arrived without a start", arrivedRecorder{httptest.NewRecorder(), time.Time{}, true}, true, time.Time{}, false},
		{"parsed whole", parsedRecorder{arrivedRecorder{httptest.NewRecorder(), earlier, true}, new(int)}, false, earlier, true},
		{"parsed, body to read", parsedRecorder{arrivedRecorder{httptest.NewRecorder(), earlier, false}, new(int)}, false, earlier, false},
		{"parsed without a start", parsedRecorder{arrivedRecorder{httptest.NewRecorder(), time.Time{}, true}, new(int)}, true, time.Time{}, false},
	} {
		before := time.Now()
		arr, _ := requestStart(c.w)
		if p, ok := c.w.(parsedRecorder); ok && *p.asked != 1 {
			t.Errorf("%s: Fields asked %d times, want once", c.name, *p.asked)
		}
		got, whole := arr.Start, arr.BodyWhole
		after := time.Now()
		if whole != c.whole || arr.LineChecked != c.whole || arr.HopFree != c.whole {
			t.Errorf("%s: %+v, want BodyWhole, LineChecked and HopFree %v", c.name, arr, c.whole)
		}
		switch {
		case !c.clock && !got.Equal(c.want):
			t.Errorf("%s: %v, want the writer's %v", c.name, got, c.want)
		case c.clock && (got.Before(before) || got.After(after)):
			t.Errorf("%s: %v, want a reading between %v and %v", c.name, got, before, after)
		}
	}
}

// TestSentAtStart: the request's start stands for the send only when the
// body arrived whole and no flow-control queue waits before it.
func TestSentAtStart(t *testing.T) {
	for _, c := range []struct {
		name  string
		whole bool
		fq    bool
		want  bool
	}{
		{"whole, no queue", true, false, true},
		{"body still to read", false, false, false},
		{"whole, flow control", true, true, false},
		{"neither", false, true, false},
	} {
		x := &exchange{arrivedWhole: c.whole}
		cc := &compiled{}
		if c.fq {
			cc.fq = new(flow.Queue)
		}
		if got := sentAtStart(x, cc); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestExchangeSizeClass: the exchange is one allocation per request, in
// the runtime's 768 B size class (768 B with its start's Mono and its id
// mint: no room left). Any field moves it to 896 B: 128 B more garbage
// per request of the ~2.7 KB the collections per request follow
// (docs/performance.md, "Session 12: the collector's share, …"). Grow it
// knowingly, then change this figure.
func TestExchangeSizeClass(t *testing.T) {
	if got := unsafe.Sizeof(exchange{}); got > 768 {
		t.Errorf("exchange is %d B, past the 768 B size class", got)
	}
}

// TestStartAt: the exchange's start as a Mono is its start converted
// (converted once, kept), and a reading made as the start plus a duration
// (the clock's NowSince) is that Mono plus the duration, as the relay's
// stream bound takes it.
func TestStartAt(t *testing.T) {
	now := time.Now()
	for _, start := range []time.Time{now, now.Add(-time.Hour), now.Add(-time.Nanosecond), now.Add(time.Second)} {
		x := &exchange{start: start}
		want := sockio.MonoOf(start)
		if got := x.startAt(); got != want {
			t.Fatalf("startAt of %v = %d, want %d", start, got, want)
		}
		x.start = start.Add(time.Minute) // kept: not converted again
		if got := x.startAt(); got != want {
			t.Fatalf("startAt converted again: %d, want %d", got, want)
		}
		for _, d := range []time.Duration{0, 1, time.Microsecond, 3 * time.Second} {
			if got, want := x.startAt().Add(d), sockio.MonoOf(start.Add(d)); got != want {
				t.Errorf("start %v + %v: %d, want %d", start, d, got, want)
			}
		}
	}
}
