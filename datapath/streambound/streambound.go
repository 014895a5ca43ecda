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

	"github.com/infergate/infergate/datapath/sockio"
)

// Bound is one stream's idle bound and cap, and the client write deadline
// it moves (none until BindClient finds one).
type Bound struct {
	// What Next reads per event comes first (on one cache line where the
	// holder places it on one, as the SSE relay's stream does). The times
	// are sockio.Mono integers: the per-event test and a move are integer
	// arithmetic, not time.Time's (an Add ~74 instructions, a compare ~15).
	hold sockio.Mono // NextAt moves nothing while now is not after it; NoDeadline: look
	last sockio.Mono // the deadline in force (the last move); NoDeadline: none yet
	end  sockio.Mono // End as a Mono, once endOK
	// Idle and End are set before the first Next (hold and end are
	// worked out from them).
	Idle  time.Duration
	End   time.Time // the stream's cap; zero: none
	endOK bool
	dl    writeDeadliner     // the client's write deadline, when it takes a time.Time
	dlAt  monoWriteDeadliner // or when it takes a Mono (h1's response)
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

// monoWriteDeadliner is a write deadline that takes a sockio.Mono: the
// lean front end's response, whose socket keeps it as one (no time.Time
// made and converted back per move).
type monoWriteDeadliner interface {
	SetWriteDeadlineAt(sockio.Mono) error
}

// BindClient makes Next move w's write deadline too, when w or a writer
// it wraps (Unwrap, as http.ResponseController follows) has one; Clear
// lifts it for the connection's next request. The writer is found once
// here, not per event, and no controller is allocated for it.
func (b *Bound) BindClient(w http.ResponseWriter) {
	for range 8 {
		// The Mono setter first: h1's response, one assertion.
		if d, ok := w.(monoWriteDeadliner); ok {
			b.dl, b.dlAt = nil, d
			return
		}
		if d, ok := w.(writeDeadliner); ok {
			b.dl, b.dlAt = d, nil
			return
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			break
		}
		w = u.Unwrap()
	}
	b.dl, b.dlAt = nil, nil
}

// setClient sets the bound client write deadline to m.
func (b *Bound) setClient(m sockio.Mono) {
	if b.dlAt != nil {
		_ = b.dlAt.SetWriteDeadlineAt(m)
	} else if b.dl != nil {
		_ = b.dl.SetWriteDeadline(m.Time())
	}
}

// Clear lifts the client write deadline BindClient bound, if any.
func (b *Bound) Clear() {
	b.last, b.hold = sockio.NoDeadline, sockio.NoDeadline
	b.setClient(sockio.NoDeadline)
}

// BindsClient reports whether Next moves a client write deadline.
func (b *Bound) BindsClient() bool { return b.dl != nil || b.dlAt != nil }

// Next moves the deadlines to now + Idle (capped at End), the client's
// write deadline with it, unless the one in force ends within
// Idle/slackDiv of that or is the cap; moved reports a move, and the
// caller then sets the engine read's deadline to d. Otherwise d is the
// deadline in force and nothing is set. (NextAt with times.)
func (b *Bound) Next(now time.Time) (d time.Time, moved bool) {
	m, moved := b.NextAt(sockio.MonoOf(now))
	return m.Time(), moved
}

// NextAt is Next on the monotonic clock (sockio.Now, or a reading the
// caller made converted with sockio.MonoOf).
//
// Why hold: an SSE stream calls it per event, and nearly every call
// moves nothing; hold is the last now at which that is certain (the
// deadline in force less Idle plus the slack; at the cap, none), so such
// a call is one comparison instead of the arithmetic of move.
func (b *Bound) NextAt(now sockio.Mono) (d sockio.Mono, moved bool) {
	if b.hold != sockio.NoDeadline && now <= b.hold {
		return b.last, false
	}
	return b.move(now)
}

// move is NextAt past hold: the whole test, and the move.
func (b *Bound) move(now sockio.Mono) (d sockio.Mono, moved bool) {
	if !b.endOK {
		b.end, b.endOK = sockio.MonoOf(b.End), true
	}
	d = now.Add(b.Idle)
	if b.end != sockio.NoDeadline && b.end < d {
		d = b.end
	}
	if b.last != sockio.NoDeadline && (b.last == b.end || d.Sub(b.last) <= b.Idle/slackDiv) {
		b.setHold()
		return b.last, false
	}
	// The first move leaves hold unset, so the next NextAt works it out
	// (in move, as above): a small answer's bound moves once, at its
	// head, and is never asked again. A stream pays it once, at its
	// second event.
	first := b.last == sockio.NoDeadline
	b.last = d
	if !first {
		b.setHold()
	}
	b.setClient(d)
	return d, true
}

// setHold sets hold for the deadline in force (last): up to last - Idle
// + Idle/slackDiv, now + Idle is within the slack of last, so the capped
// d is too; at the cap nothing moves again.
func (b *Bound) setHold() {
	if b.last == b.end {
		b.hold = forever
		return
	}
	b.hold = b.last.Add(b.Idle/slackDiv - b.Idle)
}

// forever is a hold no now passes.
const forever sockio.Mono = 1<<63 - 1

// Notice gives one last client write (an end-of-stream notice) the idle
// bound, past the cap too: the cap has already ended the stream.
func (b *Bound) Notice() {
	b.last, b.hold = sockio.Now().Add(b.Idle), sockio.NoDeadline
	b.setClient(b.last)
}
