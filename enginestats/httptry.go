package enginestats

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// errWouldBlock: a try read found nothing to read yet.
var errWouldBlock = errors.New("no data yet")

// Pauses of a read or write on a detached socket that has to wait: the
// first, doubling up to the longest (which bounds how late a wait sees its
// deadline or a close).
const (
	rawPollFirst = time.Millisecond
	rawPollMax   = 32 * time.Millisecond
)

// socket is a getter's connection as its bufio.Reader reads it and its
// requests are written. On Linux it is detached: its descriptor is taken
// off the runtime's poller (detach) and read and written with rawRead and
// rawWrite, which never block. The poller would wake a thread for every
// answer that arrives on a socket it watches, whether or not anything
// waits for it (strace of TestScrapeCost: one epoll_pwait return per
// answer, most of them while the scheduler is still writing the burst);
// the scheduler reads the answers itself, so those wake-ups were pure
// cost. Detached, nothing wakes when an answer arrives: a reader that
// must wait (a worker with a slow engine) sleeps rawPollFirst, doubling
// up to rawPollMax, and tries again until its deadline. With try set a
// read never waits (errWouldBlock): the scheduler reads answers that have
// already arrived this way and leaves the others. Elsewhere it reads and
// writes through net.Conn and has no try reads. One goroutine at a time
// reads or writes it (the scheduler or the worker, in turn); close may
// come from any goroutine.
type socket struct {
	c   net.Conn // not detached: the connection
	raw bool     // detached: fd below

	// mu is held over every system call on fd and by close, so fd is
	// never used once closed (its number may belong to another file by
	// then).
	mu       sync.Mutex
	fd       int // -1 once closed
	deadline time.Time
	try      bool
}

// newSocket takes over c: detached when this platform can (c is then
// closed; the socket holds a duplicate of its descriptor), else as is.
func newSocket(c net.Conn) *socket {
	if rawIO {
		if fd, err := detach(c); err == nil {
			_ = c.Close()
			return &socket{raw: true, fd: fd}
		}
	}
	return &socket{c: c, fd: -1}
}

// setDeadline bounds the reads and writes that wait (zero: none).
func (so *socket) setDeadline(t time.Time) error {
	if !so.raw {
		return so.c.SetDeadline(t)
	}
	so.deadline = t
	return nil
}

// close closes the connection; a read or write waiting on it returns
// within rawPollMax (net.ErrClosed).
func (so *socket) close() {
	if !so.raw {
		_ = so.c.Close()
		return
	}
	so.mu.Lock()
	defer so.mu.Unlock()
	if so.fd >= 0 {
		_ = syscall.Close(so.fd)
		so.fd = -1
	}
}

// rawOp runs op once on the descriptor, never after close.
func (so *socket) rawOp(op func(uintptr, []byte) (int, error), p []byte) (int, error) {
	so.mu.Lock()
	defer so.mu.Unlock()
	if so.fd < 0 {
		return 0, net.ErrClosed
	}
	return op(uintptr(so.fd), p)
}

// pause waits before the next try of a detached read or write: d, or
// what is left before the deadline; os.ErrDeadlineExceeded (a net.Error
// timeout) once it has passed.
func (so *socket) pause(d time.Duration) error {
	if !so.deadline.IsZero() {
		left := time.Until(so.deadline)
		if left <= 0 {
			return os.ErrDeadlineExceeded
		}
		d = min(d, left)
	}
	time.Sleep(d)
	return nil
}

func (so *socket) Read(p []byte) (int, error) {
	if !so.raw {
		if so.try {
			return 0, errWouldBlock
		}
		return so.c.Read(p)
	}
	for wait := rawPollFirst; ; wait = min(2*wait, rawPollMax) {
		n, err := so.rawOp(rawRead, p)
		switch {
		case err == syscall.EAGAIN:
		case err != nil:
			return 0, err
		case n == 0 && len(p) > 0:
			return 0, io.EOF
		default:
			return n, nil
		}
		if so.try {
			return 0, errWouldBlock
		}
		if err := so.pause(wait); err != nil {
			return 0, err
		}
	}
}

// write writes all of p. With wait false it never waits for room in the
// socket's buffer (errWouldBlock; the request may then be cut short); one
// small request on an idle connection always fits.
func (so *socket) write(p []byte, wait bool) error {
	if !so.raw {
		if !wait {
			return errWouldBlock
		}
		_, err := so.c.Write(p)
		return err
	}
	for pause := rawPollFirst; len(p) > 0; {
		n, err := so.rawOp(rawWrite, p)
		switch {
		case err == syscall.EAGAIN:
			if !wait {
				return errWouldBlock
			}
			if err := so.pause(pause); err != nil {
				return err
			}
			pause = min(2*pause, rawPollMax)
		case err != nil:
			return err
		default:
			p = p[n:]
		}
	}
	return nil
}

// tryReceive reads the answer to presend's request if the whole of it has
// already arrived, without waiting: done is false when it has not (or the
// connection broke: then it is closed and the worker's get dials again),
// and nothing is consumed, so the worker's get reads it from the start.
func (g *getter) tryReceive(limit int64, buf []byte) (body []byte, done bool, err error) {
	g.mu.Lock()
	br, so := g.br, g.so
	g.mu.Unlock()
	if so == nil {
		return buf, false, nil
	}
	so.try = true
	defer func() { so.try = false }()
	// Read what has arrived on top of what an earlier try left buffered,
	// until the answer is whole or nothing more is there.
	for n := 1; !answered(peekBuffered(br)); n = br.Buffered() + 1 {
		if _, err := br.Peek(n); err != nil {
			if !errors.Is(err, errWouldBlock) && !errors.Is(err, bufio.ErrBufferFull) {
				g.close() // the engine closed the idle connection: redial
			}
			return buf, false, nil
		}
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
