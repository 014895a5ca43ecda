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

// socket is a getter's connection as its bufio.Reader reads it and its
// requests are written: through rawRead and rawWrite, waiting on the
// runtime's poller like net.Conn does (deadline included), or, while try
// is set, with read attempts that never wait (errWouldBlock). The
// scheduler reads answers that have already arrived this way and leaves
// the others to their worker, so it never waits on an engine. One
// goroutine at a time uses it (the scheduler or the worker, in turn).
type socket struct {
	c   net.Conn
	rc  syscall.RawConn // nil: net.Conn's own Read and Write; no try reads
	try bool

	// The raw callbacks, built once, and their arguments and results: a
	// closure per call would cost three allocations per read or write.
	readFn, writeFn func(fd uintptr) bool
	p               []byte
	n               int
	errno           error
	wait            bool // writeFn waits for room
}

func newSocket(c net.Conn) *socket {
	so := &socket{c: c}
	if sc, ok := c.(syscall.Conn); ok && rawIO {
		so.rc, _ = sc.SyscallConn()
	}
	so.readFn, so.writeFn = so.readOnce, so.writeAll
	return so
}

func (so *socket) readOnce(fd uintptr) bool {
	so.n, so.errno = rawRead(fd, so.p)
	return so.errno != syscall.EAGAIN || so.try // false: wait until readable
}

func (so *socket) writeAll(fd uintptr) bool {
	for len(so.p) > 0 {
		n, e := rawWrite(fd, so.p)
		if e == syscall.EAGAIN {
			return !so.wait // false: wait for room
		}
		if e != nil {
			so.errno = e
			return true
		}
		so.p = so.p[n:]
	}
	return true
}

func (so *socket) Read(p []byte) (int, error) {
	if so.rc == nil {
		if so.try {
			return 0, errWouldBlock
		}
		return so.c.Read(p)
	}
	so.p = p
	err := so.rc.Read(so.readFn)
	n, errno := so.n, so.errno
	so.p = nil
	switch {
	case err != nil:
		return 0, err // deadline or closed
	case errno == syscall.EAGAIN:
		return 0, errWouldBlock
	case errno != nil:
		return 0, errno
	case n == 0 && len(p) > 0:
		return 0, io.EOF
	}
	return n, nil
}

// write writes all of p. With wait false it never waits for room in the
// socket's buffer (errWouldBlock; the request may then be cut short); one
// small request on an idle connection always fits.
func (so *socket) write(p []byte, wait bool) error {
	if so.rc == nil {
		if !wait {
			return errWouldBlock
		}
		_, err := so.c.Write(p)
		return err
	}
	so.p, so.wait, so.errno = p, wait, nil
	err := so.rc.Write(so.writeFn)
	left, errno := len(so.p), so.errno
	so.p = nil
	switch {
	case err != nil:
		return err
	case errno != nil:
		return errno
	case left > 0:
		return errWouldBlock
	}
	return nil
}

// tryReceive reads the answer to presend's request if the whole of it has
// already arrived, without waiting: done is false when it has not (or the
// connection broke: then it is closed and the worker's get dials again),
// and nothing is consumed, so the worker's get reads it from the start.
func (g *getter) tryReceive(limit int64, buf []byte) (body []byte, done bool, err error) {
	g.mu.Lock()
	c, br, so := g.c, g.br, g.so
	g.mu.Unlock()
	if c == nil {
		return buf, false, nil
	}
	so.try = true
	defer func() { so.try = false }()
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
	for rest := head[i+1:]; len(rest) > 0; {
		var line []byte
		line, rest, _ = bytes.Cut(rest, []byte("\r\n"))
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
