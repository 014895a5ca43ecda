package sockio

import "errors"

// errNoSocket is ReadEach's answer when c has no plaintext TCP socket
// under it (CanReadEach is false).
var errNoSocket = errors.New("sockio: ReadEach needs a plaintext TCP socket")

// EachState is ReadEach's state for one stream. Why the caller holds it:
// kept beside the handler's own fields (in one allocation), what a
// wake-up touches of both shares cache lines; with 1,000 streams every
// line of a stream is a cache miss per relayed event.
type EachState struct {
	op eachOp
	// Loops, when set, runs the reads from its epoll loops (no wake-up
	// of the caller's goroutine per read); nil: the caller's own waits.
	Loops *Loops
	// Client is the connection the handler writes to inside its Hold
	// step (nil: none): from a loop, a write to it that would block is
	// kept and written by ReadEach's caller, which the loop never waits
	// for.
	Client *Conn
	// Detach, with Loops, takes the socket out of the runtime's poller
	// while a loop reads it (one readiness report per event instead of
	// two) and hands it back under a new net.Conn: the caller closes the
	// connection through the Conn's NetConn afterwards, never through
	// the net.Conn it gave New or Reset.
	Detach bool
}

// ClientWriteError is ReadEach's answer when a client write it kept from
// a loop (EachState.Client) failed.
type ClientWriteError struct{ Err error }

func (e *ClientWriteError) Error() string { return "client write: " + e.Err.Error() }
func (e *ClientWriteError) Unwrap() error { return e.Err }

// ReadHandler receives what ReadEach reads.
type ReadHandler interface {
	// Buffer returns the buffer for the next read: the one lent since the
	// last Idle, or a new one.
	Buffer() []byte
	// Handle takes the bytes of one read: a prefix of Buffer's buffer,
	// or, from a loop (EachState.Loops), of the loop's own, which is the
	// next stream's once Handle returns: Handle keeps none of p (a client
	// write it stashes is copied). false stops ReadEach, which then
	// returns err.
	Handle(p []byte) (more bool, err error)
	// Idle says the buffer is not needed until the next Buffer: ReadEach
	// is about to wait for readiness, or to return. Reads from a loop
	// ask for no Buffer, and Idle follows only their last.
	Idle()
}
