package datapath

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// readDeadlineWriter records the read deadlines a ResponseController sets.
type readDeadlineWriter struct {
	http.ResponseWriter
	set []time.Time
}

func (w *readDeadlineWriter) SetReadDeadline(t time.Time) error {
	w.set = append(w.set, t)
	return nil
}

// TestChunkReadCap: a chunk moves the client read deadline per past now,
// never past the whole body's cap from the request's start (none when
// the cap is unset).
func TestChunkReadCap(t *testing.T) {
	const per = time.Minute
	for _, tc := range []struct {
		name    string
		whole   time.Duration
		started time.Duration // before now
		capped  bool          // the deadline is start + whole
	}{
		{"no cap", 0, time.Hour, false},
		{"cap later than per", 2 * time.Hour, time.Minute, false},
		{"cap sooner than per", 2 * time.Minute, 90 * time.Second, true},
		{"cap passed", time.Second, time.Minute, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &readDeadlineWriter{ResponseWriter: httptest.NewRecorder()}
			start := time.Now().Add(-tc.started)
			b := streamedBody{rc: *http.NewResponseController(w), per: per, start: &start, whole: tc.whole}
			before := time.Now()
			b.ChunkRead()
			after := time.Now()
			if len(w.set) != 1 {
				t.Fatalf("%d read deadlines set, want 1", len(w.set))
			}
			got := w.set[0]
			if tc.capped {
				if want := start.Add(tc.whole); !got.Equal(want) {
					t.Fatalf("deadline %v, want the cap %v", got, want)
				}
				return
			}
			if got.Before(before.Add(per)) || got.After(after.Add(per)) {
				t.Fatalf("deadline %v, want now + %v", got, per)
			}
		})
	}
}
