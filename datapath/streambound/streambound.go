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
	Idle  time.Duration
	End   time.Time // the stream's cap; zero: none
	write func(time.Time) error
}

// BindClient makes Next move w's write deadline too, when w has one (the
// lean front end's response, or through http.ResponseController); the
// returned func clears it for the connection's next request.
func (b *Bound) BindClient(w http.ResponseWriter) (clear func()) {
	if d, ok := w.(interface{ SetWriteDeadline(time.Time) error }); ok {
		b.write = d.SetWriteDeadline
	} else if rc := http.NewResponseController(w); rc.SetWriteDeadline(time.Time{}) == nil {
		b.write = rc.SetWriteDeadline
	} else {
		return func() {}
	}
	return func() { _ = b.write(time.Time{}) }
}

// BindsClient reports whether Next moves a client write deadline.
func (b *Bound) BindsClient() bool { return b.write != nil }

// Next is now + Idle, capped at End; the client's write deadline moves
// there. The caller sets the engine read's deadline to it.
func (b *Bound) Next(now time.Time) time.Time {
	d := now.Add(b.Idle)
	if !b.End.IsZero() && b.End.Before(d) {
		d = b.End
	}
	if b.write != nil {
		_ = b.write(d)
	}
	return d
}

// Notice gives one last client write (an end-of-stream notice) the idle
// bound, past the cap too: the cap has already ended the stream.
func (b *Bound) Notice() {
	if b.write != nil {
		_ = b.write(time.Now().Add(b.Idle))
	}
}
