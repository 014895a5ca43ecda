package datapath

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
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
