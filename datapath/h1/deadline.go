package h1

import (
	"errors"
	"os"
	"time"
)

// Why lazy read deadlines: a kept-alive connection asks for a new read
// deadline at every turn (the idle wait, the body's ReadTimeout, lifted by
// the handler once the body is in), and every socket deadline change is a
// runtime timer update under the descriptor's lock. Instead the socket
// keeps the deadline it has while the one asked for is later (or none); a
// read that times out on the earlier one re-arms the one asked for and
// reads on. Requests arriving within the armed bound then cost no timer
// update at all; a nearer bound (the head's ReadHeaderTimeout) is set at
// once. Only the connection's goroutine reads or asks: Shutdown and Close
// close the connection instead of moving its deadline.

// setReadDeadline bounds the connection's next reads by t (zero: none).
func (c *conn) setReadDeadline(t time.Time) error {
	c.readDL = t
	if !c.armedDL.IsZero() && (t.IsZero() || !t.Before(c.armedDL)) {
		return nil // the armed deadline fires first; Read re-arms t then
	}
	c.armedDL = t
	return c.nc.SetReadDeadline(t)
}

// Read reads from the connection (the source of its bufio.Reader),
// reading on past an armed deadline earlier than the one asked for.
func (c *conn) Read(p []byte) (int, error) {
	for {
		n, err := c.nc.Read(p)
		if n > 0 || err == nil || !errors.Is(err, os.ErrDeadlineExceeded) ||
			(!c.readDL.IsZero() && !time.Now().Before(c.readDL)) {
			return n, err
		}
		c.armedDL = c.readDL
		if err := c.nc.SetReadDeadline(c.readDL); err != nil {
			return 0, err
		}
	}
}
