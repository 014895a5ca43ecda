package upstream

import "bufio"

// Why wait before reading: a relay that reads an engine stream into its
// own buffer holds that buffer for as long as the engine is silent, which
// for an open SSE stream is nearly all of its life. Waiting for the socket
// to become readable first (no buffer needed) lets the relay borrow a
// buffer only while an event is in hand, so idle streams share a few
// buffers instead of each pinning one.

// ReadWaiter is implemented by response bodies that can wait until a read
// would not block without the caller holding a read buffer.
type ReadWaiter interface {
	// WaitReadable returns once the next Read has bytes (or an end, an
	// error, an expired deadline or an abort) to report, or at once when
	// it cannot tell; the Read that follows reports what happened.
	WaitReadable()
}

var _ ReadWaiter = (*body)(nil)

// WaitReadable waits until the engine's socket has bytes when none are
// buffered (sockio.Conn.WaitReadable: at once on TLS, where records sit
// under the socket's bytes), with pc's read buffer lent to the Client's
// pool for the length of the wait.
func (b *body) WaitReadable() {
	pc := b.pc
	if b.done || pc.tls || pc.br.Buffered() > 0 || b.Buffered() {
		return
	}
	b.c.parkReader(pc)
	defer b.c.unparkReader(pc)
	pc.sock.WaitReadable()
}

// parkReader lends pc's empty read buffer to the Client's pool for the
// length of a wait (a silent stream would otherwise pin a touched page
// of it). pc.br stays the same *bufio.Reader (the body's chunked decoder
// holds it) but holds no buffer until unparkReader: a wait touches
// nothing else of it. The buffer moves by copying the bufio.Reader value
// into a holder; the holder pc leaves in exchange is kept as pc.spare.
// A read error the reader held back (its buffer being empty) is dropped
// with it: the socket reports it again (an end, a reset, a past deadline
// or an abort are all sticky on the socket).
func (c *Client) parkReader(pc *conn) {
	h := pc.spare
	if h == nil {
		h = new(bufio.Reader)
	}
	*h = *pc.br
	h.Reset(nil) // the pool must not keep pc reachable
	*pc.br = bufio.Reader{}
	pc.spare = nil
	c.readers.Put(h)
}

// unparkReader gives pc a pooled read buffer (bufSize bytes), empty and
// reading from pc: back after a wait, or at an exchange's answer on a
// plaintext connection, which holds none before it (dial, Stream).
func (c *Client) unparkReader(pc *conn) {
	h, _ := c.readers.Get().(*bufio.Reader)
	if h == nil {
		h = bufio.NewReaderSize(&pc.sock, bufSize)
	}
	*pc.br = *h
	pc.br.Reset(&pc.sock)
	*h = bufio.Reader{}
	pc.spare = h
}
