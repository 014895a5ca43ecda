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
	// What Next reads per event comes first (48 bytes: on one cache line
	// where the holder places it on one, as the SSE relay's stream does).
	hold time.Time // Next moves nothing while now is not after it; zero: look
	last time.Time // the deadline in force (Next's last move); zero: none yet
	// Idle and End are set before the first Next (hold is worked out
	// from them).
	Idle time.Duration
	End  time.Time // the stream's cap; zero: none
	dl   writeDeadliner
}

// slackDiv: the deadlines stay where they are while they end no sooner
// than now + Idle - Idle/slackDiv, so the events that follow within that
// slack move nothing. An SSE stream sends tens of events a second; moving
// two deadlines for each (two calls through the connections' wrappers,
// cold lines of each) is per-event work nginx does not do: its timers keep
// an earlier expiry within a fixed lazy delay of the new one. As there,
// silence ends a stream no later than Idle after its last event, and at
// most Idle/slackDiv sooner (never later: a request waiting for one of
// the engine's connections, bounded by an equal first-byte wait, still
// gets the one a silent stream frees).
const slackDiv = 64

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
	b.last, b.hold = time.Time{}, time.Time{}
	if b.dl != nil {
		_ = b.dl.SetWriteDeadline(time.Time{})
	}
}

// BindsClient reports whether Next moves a client write deadline.
func (b *Bound) BindsClient() bool { return b.dl != nil }

// Next moves the deadlines to now + Idle (capped at End), the client's
// write deadline with it, unless the one in force ends within
// Idle/slackDiv of that or is the cap; moved reports a move, and the
// caller then sets the engine read's deadline to d. Otherwise d is the
// deadline in force and nothing is set.
//
// Why hold: an SSE stream calls Next per event, and nearly every call
// moves nothing; hold is the last now at which that is certain (the
// deadline in force less Idle plus the slack; at the cap, none), so such
// a call is one comparison instead of the time arithmetic of move (two
// Adds, a Sub, the cap's tests: ~170 instructions an event).
func (b *Bound) Next(now time.Time) (d time.Time, moved bool) {
	if !b.hold.Before(now) {
		return b.last, false
	}
	return b.move(now)
}

// move is Next past hold: the whole test, and the move.
func (b *Bound) move(now time.Time) (d time.Time, moved bool) {
	d = now.Add(b.Idle)
	if !b.End.IsZero() && b.End.Before(d) {
		d = b.End
	}
	if !b.last.IsZero() && (b.last.Equal(b.End) || d.Sub(b.last) <= b.Idle/slackDiv) {
		b.setHold()
		return b.last, false
	}
	// The first move leaves hold zero, so the next Next works it out (in
	// move, as above): a small answer's bound moves once, at its head,
	// and is never asked again, and setting hold there (a Time.Add and an
	// Equal) was ~135 instructions per request (callgrind). A stream pays
	// it once, at its second event.
	first := b.last.IsZero()
	b.last = d
	if !first {
		b.setHold()
	}
	if b.dl != nil {
		_ = b.dl.SetWriteDeadline(d)
	}
	return d, true
}

// setHold sets hold for the deadline in force (last): up to last - Idle
// + Idle/slackDiv, now + Idle is within the slack of last, so the capped
// d is too; at the cap nothing moves again.
func (b *Bound) setHold() {
	if b.last.Equal(b.End) {
		b.hold = forever
		return
	}
	b.hold = b.last.Add(b.Idle/slackDiv - b.Idle)
}

// forever is a hold no now passes (the year 292277026596).
var forever = time.Unix(1<<63-62135596801, 999999999)

// Notice gives one last client write (an end-of-stream notice) the idle
// bound, past the cap too: the cap has already ended the stream.
func (b *Bound) Notice() {
	b.last, b.hold = time.Now().Add(b.Idle), time.Time{}
	if b.dl != nil {
		_ = b.dl.SetWriteDeadline(b.last)
	}
}
