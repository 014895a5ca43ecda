package sockio

import "time"

// Mono is a deadline as monotonic nanoseconds since the package's epoch,
// a clock reading made once when the program starts. Zero is no deadline.
//
// Why an integer: a request's deadlines (the idle wait, the engine's
// head, a stream's bound) are a clock reading plus a duration, and
// time.Time.Add does the wall and monotonic bookkeeping on each (~74
// instructions; a compare ~15). Deadlines here are lazy: the socket is
// given one, as a time.Time, only when a read would block past an
// earlier armed one (arm), so most are only ever added and compared.
type Mono int64

// epoch is what Mono counts from. Set once at package initialisation
// and never written after: it is a constant of the process, like the
// runtime's own start of the monotonic clock.
var epoch = time.Now()

// NoDeadline is the Mono of no deadline.
const NoDeadline Mono = 0

// Now is the monotonic clock as a Mono: one clock reading (time.Now makes
// two, wall and monotonic).
func Now() Mono { return monoOfDuration(time.Since(epoch)) }

// MonoOf is t as a Mono (the zero time: NoDeadline). A t with a monotonic
// reading (time.Now's and what is added to it) converts exactly; another
// goes by its wall clock. A far-off t saturates at the ends of Mono.
func MonoOf(t time.Time) Mono {
	if t.IsZero() {
		return NoDeadline
	}
	return monoOfDuration(t.Sub(epoch))
}

// monoOfDuration is the Mono d after the epoch: never NoDeadline, which
// would read as none (the epoch itself is one nanosecond later).
func monoOfDuration(d time.Duration) Mono {
	if d == 0 {
		return 1
	}
	return Mono(d)
}

// Add is m moved by d, saturating (a deadline far off stays far off),
// and never NoDeadline. Adding to NoDeadline is adding to the epoch.
func (m Mono) Add(d time.Duration) Mono {
	s := m + Mono(d)
	switch {
	case d > 0 && s < m:
		s = 1<<63 - 1
	case d < 0 && s > m:
		s = -1 << 63
	case s == NoDeadline:
		s = 1
	}
	return s
}

// Time is m as a time.Time with a monotonic reading (NoDeadline: the zero
// time), for the socket's own deadline setters.
func (m Mono) Time() time.Time {
	if m == NoDeadline {
		return time.Time{}
	}
	return epoch.Add(time.Duration(m))
}

// Sub is the duration from u to m.
func (m Mono) Sub(u Mono) time.Duration { return time.Duration(m - u) }
