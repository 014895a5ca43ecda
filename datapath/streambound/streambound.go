// Package streambound bounds a relayed stream's waits alike: the next read
// from the engine and the next write to the client both end at now + the
// idle bound, never past the stream's cap. A client that stops reading is
// then held exactly as long as a silent engine — a relay blocked in a
// client write is unblocked by no read deadline. The proxy's relays and
// the P/D decode relay share it.
package streambound

import (
	"net/http"
	"time"
)

// Bound is one stream's idle bound and cap, and the client write deadline
// it moves (none until BindClient finds one).
type Bound struct {
	Idle time.Duration
	End  time.Time // the stream's cap; zero: none
	dl   writeDeadliner
}

// writeDeadliner is a client connection's write deadline: the lean front
// end's response, or an http.ResponseController. Kept as an interface, not
// a method value, so binding every relayed body allocates nothing.
type writeDeadliner interface{ SetWriteDeadline(time.Time) error }

// BindClient makes Next move w's write deadline too, when w or a writer
// it wraps (Unwrap, as http.ResponseController follows) has one; Clear
// lifts it for the connection's next request. The writer is found once
// here, not per event, and no controller is allocated for it.
func (b *Bound) BindClient(w http.ResponseWriter) {
	for range 8 {
		if d, ok := w.(writeDeadliner); ok {
			b.dl = d
			return
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			break
		}
		w = u.Unwrap()
	}
	b.dl = nil
}

// Clear lifts the client write deadline BindClient bound, if any.
func (b *Bound) Clear() {
	if b.dl != nil {
		_ = b.dl.SetWriteDeadline(time.Time{})
	}
}

// BindsClient reports whether Next moves a client write deadline.
func (b *Bound) BindsClient() bool { return b.dl != nil }

// Next is now + Idle, capped at End; the client's write deadline moves
// there. The caller sets the engine read's deadline to it.
func (b *Bound) Next(now time.Time) time.Time {
	d := now.Add(b.Idle)
	if !b.End.IsZero() && b.End.Before(d) {
		d = b.End
	}
	if b.dl != nil {
		_ = b.dl.SetWriteDeadline(d)
	}
	return d
}

// Notice gives one last client write (an end-of-stream notice) the idle
// bound, past the cap too: the cap has already ended the stream.
func (b *Bound) Notice() {
	if b.dl != nil {
		_ = b.dl.SetWriteDeadline(time.Now().Add(b.Idle))
	}
}
