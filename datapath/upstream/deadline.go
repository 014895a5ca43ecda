package upstream

import (
	"errors"
	"os"
	"time"
)

// Why lazy read deadlines: the relay moves an engine connection's read
// deadline forward on every read of a streamed answer (the idle bound), and
// every socket deadline change is a runtime timer update under the
// descriptor's lock. Instead the socket keeps the deadline it has while the
// one asked for is later; a read that times out on the earlier one re-arms
// the one asked for and reads on. A stream whose events keep coming then
// updates its timer once per idle period instead of once per event, and a
// request's header wait set over a deadline left by the previous exchange
// costs nothing until it matters. Writes have no such retry: their deadline
// is set as asked (and skipped when unchanged).

// setReadDeadline bounds the next reads by t (zero: no bound).
func (pc *conn) setReadDeadline(t time.Time) {
	pc.wantRD = t
	if !pc.armedRD.IsZero() && (t.IsZero() || !t.Before(pc.armedRD)) {
		return // the armed deadline fires first; Read re-arms t then
	}
	pc.armRead(t)
}

// setWriteDeadline bounds the next writes by t (zero: no bound).
func (pc *conn) setWriteDeadline(t time.Time) {
	if t.Equal(pc.armedWD) {
		return
	}
	pc.armedWD = t
	_ = pc.nc.SetWriteDeadline(t)
	if pc.aborted.Load() {
		_ = pc.nc.SetWriteDeadline(aLongTimeAgo) // an abort in between wins
	}
}

// setDeadline is setReadDeadline and setWriteDeadline.
func (pc *conn) setDeadline(t time.Time) {
	pc.setReadDeadline(t)
	pc.setWriteDeadline(t)
}

// armRead sets the socket's read deadline. An abort that raced with it
// wins: its past deadline is put back.
func (pc *conn) armRead(t time.Time) {
	pc.armedRD = t
	_ = pc.nc.SetReadDeadline(t)
	if pc.aborted.Load() {
		_ = pc.nc.SetReadDeadline(aLongTimeAgo)
	}
}

// Read reads from the connection (its bufio.Reader's source), reading on
// past an armed deadline earlier than the one asked for.
func (pc *conn) Read(p []byte) (int, error) {
	for {
		n, err := pc.nc.Read(p)
		if n > 0 || err == nil || !pc.early(err) {
			return n, err
		}
		pc.armRead(pc.wantRD)
	}
}

// early reports whether err is the armed read deadline passing while the
// one asked for has not (and the exchange was not aborted).
func (pc *conn) early(err error) bool {
	if !errors.Is(err, os.ErrDeadlineExceeded) || pc.aborted.Load() {
		return false
	}
	return pc.wantRD.IsZero() || time.Now().Before(pc.wantRD)
}
