package upstream

import "errors"

// DialError marks a request that never reached the engine: the TCP connect
// or the TLS handshake failed, so nothing was written. Retry policy keys off
// this type only (NotSent), never off error text.
type DialError struct {
	Endpoint string
	Err      error
}

func (e *DialError) Error() string { return "dial " + e.Endpoint + ": " + e.Err.Error() }
func (e *DialError) Unwrap() error { return e.Err }

// NotSent reports that the request provably never reached the engine.
func (e *DialError) NotSent() bool { return true }

// NotSent reports whether err says the engine provably never received the
// request (a *DialError in its chain): the only failure safe to retry on
// another endpoint without evidence from the engine.
func NotSent(err error) bool {
	var de *DialError
	return errors.As(err, &de)
}

// ClientBodyError is a failure reading the client's body while streaming it
// (BodyStream): the client's fault, or the size cap (TooLarge), answered
// with a 4xx. The engine saw a cut request.
type ClientBodyError struct {
	TooLarge bool
	Err      error
}

func (e *ClientBodyError) Error() string { return "reading client body: " + e.Err.Error() }
func (e *ClientBodyError) Unwrap() error { return e.Err }
