package enginestats

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"strconv"
	"syscall"
)

// errWouldBlock: a try read found nothing to read yet.
var errWouldBlock = errors.New("no data yet")

// connReader is what a getter's bufio.Reader reads: the connection's
// socket through rawRead (waiting for data on the runtime's poller like
// net.Conn.Read does, deadline included), or, while try is set, one read
// attempt that never waits (errWouldBlock). The scheduler reads answers
// that have already arrived this way and leaves the others to their
// worker, so it never waits on an engine.
type connReader struct {
	c   net.Conn
	rc  syscall.RawConn // nil: net.Conn's own Read and Write; no try reads
	try bool
}

func newConnReader(c net.Conn) *connReader {
	cr := &connReader{c: c}
	if sc, ok := c.(syscall.Conn); ok && rawIO {
		cr.rc, _ = sc.SyscallConn()
	}
	return cr
}

func (cr *connReader) Read(p []byte) (int, error) {
	if cr.rc == nil {
		if cr.try {
			return 0, errWouldBlock
		}
		return cr.c.Read(p)
	}
	var n int
	var rerr error
	err := cr.rc.Read(func(fd uintptr) bool {
		n, rerr = rawRead(fd, p)
		return rerr != syscall.EAGAIN || cr.try // false: wait until readable
	})
	switch {
	case err != nil:
		return 0, err // deadline or closed
	case rerr == syscall.EAGAIN:
		return 0, errWouldBlock
	case rerr != nil:
		return 0, rerr
	case n == 0 && len(p) > 0:
		return 0, io.EOF
	}
	return n, nil
}

// tryWrite writes all of p without waiting: errWouldBlock if the socket
// cannot take it at once (the request may then be cut short).
func (cr *connReader) tryWrite(p []byte) error {
	if cr.rc == nil {
		return errWouldBlock
	}
	var werr error
	err := cr.rc.Write(func(fd uintptr) bool {
		for len(p) > 0 && werr == nil {
			var n int
			n, werr = rawWrite(fd, p)
			p = p[n:]
		}
		return true // one attempt: never wait for room
	})
	switch {
	case err != nil:
		return err
	case werr == syscall.EAGAIN:
		return errWouldBlock
	}
	return werr
}

// write writes all of p, waiting for room on the poller if the socket's
// buffer is full (it never is for one small request).
func (cr *connReader) write(p []byte) error {
	if cr.rc == nil {
		_, err := cr.c.Write(p)
		return err
	}
	var werr error
	err := cr.rc.Write(func(fd uintptr) bool {
		for len(p) > 0 {
			n, e := rawWrite(fd, p)
			if e == syscall.EAGAIN {
				return false
			}
			if e != nil {
				werr = e
				return true
			}
			p = p[n:]
		}
		return true
	})
	if err != nil {
		return err
	}
	return werr
}

// tryReceive reads the answer to presend's request if the whole of it has
// already arrived, without waiting: done is false when it has not (or the
// connection broke: then it is closed and the worker's get dials again),
// and nothing is consumed, so the worker's get reads it from the start.
func (g *getter) tryReceive(limit int64, buf []byte) (body []byte, done bool, err error) {
	g.mu.Lock()
	c, br, cr := g.c, g.br, g.cr
	g.mu.Unlock()
	if c == nil {
		return buf, false, nil
	}
	cr.try = true
	defer func() { cr.try = false }()
	if _, err := br.Peek(1); err != nil {
		if !errors.Is(err, errWouldBlock) {
			g.close() // the engine closed the idle connection: redial
		}
		return buf, false, nil
	}
	if !answered(peekBuffered(br)) {
		return buf, false, nil
	}
	body, keep, err := g.receive(br, limit, buf)
	if errors.Is(err, errWouldBlock) {
		err = io.ErrUnexpectedEOF // answered was wrong: never wait here
	}
	if err != nil || !keep {
		g.close()
	}
	return body, true, err
}

// peekBuffered is what br holds, not consumed.
func peekBuffered(br *bufio.Reader) []byte {
	b, _ := br.Peek(br.Buffered())
	return b
}

// answered reports whether b holds one whole HTTP/1.1 response: the
// header block, and for a 200 the body framed by Content-Length or as
// complete chunks. It only looks; anything it is unsure of (a body read
// to close, a line it cannot read) is "not yet", which leaves the answer
// to the worker's reads.
func answered(b []byte) bool {
	end := bytes.Index(b, []byte("\r\n\r\n"))
	if end < 0 {
		return false
	}
	head, rest := b[:end+2], b[end+4:]
	i := bytes.IndexByte(head, '\n')
	status := head[:i]
	if len(status) < 12 || string(status[9:12]) != "200" {
		return true // receive reads no body of a non-200
	}
	length, chunked := -1, false
	for _, line := range bytes.Split(head[i+1:], []byte("\r\n")) {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		v = bytes.TrimSpace(v)
		switch {
		case bytes.EqualFold(k, []byte("Content-Length")):
			n, err := strconv.Atoi(string(v))
			if err != nil {
				return false
			}
			length = n
		case bytes.EqualFold(k, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(v, []byte("chunked"))
		}
	}
	switch {
	case chunked:
		return chunksComplete(rest)
	case length >= 0:
		return len(rest) >= length
	}
	return false
}

// chunksComplete reports whether b holds every chunk of a chunked body,
// the last (zero) chunk and the blank line after its trailers.
func chunksComplete(b []byte) bool {
	for {
		nl := bytes.IndexByte(b, '\n')
		if nl < 0 {
			return false
		}
		line := bytes.TrimRight(b[:nl], "\r")
		if semi := bytes.IndexByte(line, ';'); semi >= 0 {
			line = line[:semi]
		}
		n, err := strconv.ParseUint(string(bytes.TrimSpace(line)), 16, 31)
		if err != nil {
			return false
		}
		b = b[nl+1:]
		if n == 0 {
			for { // trailers, then a blank line
				nl := bytes.IndexByte(b, '\n')
				if nl < 0 {
					return false
				}
				if len(bytes.TrimRight(b[:nl], "\r")) == 0 {
					return true
				}
				b = b[nl+1:]
			}
		}
		if uint64(len(b)) < n+2 {
			return false
		}
		b = b[n+2:]
	}
}
