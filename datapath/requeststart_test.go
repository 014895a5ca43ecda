package datapath

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
	"unsafe"
)

// startedRecorder is a ResponseWriter that knows its request's start, as
// h1's does.
type startedRecorder struct {
	*httptest.ResponseRecorder
	at time.Time
}

func (s startedRecorder) Started() time.Time { return s.at }

func TestRequestStart(t *testing.T) {
	earlier := time.Now().Add(-time.Second)
	for _, c := range []struct {
		name  string
		w     http.ResponseWriter
		clock bool // the clock is read: a time within the call
		want  time.Time
	}{
		{"front end's start", startedRecorder{httptest.NewRecorder(), earlier}, false, earlier},
		{"front end without one", startedRecorder{httptest.NewRecorder(), time.Time{}}, true, time.Time{}},
		{"net/http's writer", httptest.NewRecorder(), true, time.Time{}},
	} {
		before := time.Now()
		got := requestStart(c.w)
		after := time.Now()
		switch {
		case !c.clock && !got.Equal(c.want):
			t.Errorf("%s: %v, want the writer's %v", c.name, got, c.want)
		case c.clock && (got.Before(before) || got.After(after)):
			t.Errorf("%s: %v, want a reading between %v and %v", c.name, got, before, after)
		}
	}
}

// TestExchangeSizeClass: the exchange is one allocation per request, in
// the runtime's 768 B size class (760 B with its end time). A field of
// more than 8 B moves it to 896 B: 128 B more garbage per request of the
// ~2.7 KB the collections per request follow (docs/performance.md,
// "Session 12: the collector's share, …"). Grow it knowingly, then
// change this figure.
func TestExchangeSizeClass(t *testing.T) {
	if got := unsafe.Sizeof(exchange{}); got > 768 {
		t.Errorf("exchange is %d B, past the 768 B size class", got)
	}
}
