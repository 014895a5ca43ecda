package main

import (
	"bytes"
	"errors"
)

// The framing both proxies share, so that the only difference between
// them is how they wait for sockets. It is the least HTTP/1.1 a proxy must
// understand to keep connections alive: where a message's head ends,
// whether a body follows and how long it is (Content-Length or chunked),
// and whether either side asked to close. Heads are forwarded byte for
// byte; nothing is rewritten.

var (
	errFraming  = errors.New("floor: malformed or unsupported message framing")
	errTooLong  = errors.New("floor: head or chunk line longer than the buffer")
	errTrailing = errors.New("floor: engine sent bytes past its response")
	errClosed   = errors.New("floor: connection closed")
)

type frameState uint8

const (
	inHead frameState = iota
	inFixedBody
	inChunkSize
	inChunkData
	inChunkEnd // the CRLF after a chunk's data
	inTrailer
	inDone
)

// framer walks one HTTP/1.1 message at a time. advance takes the bytes
// not yet walked and says how many belong to the current message; a head
// or a line is taken only whole (advance returns 0 until it is).
type framer struct {
	st       frameState
	left     int64 // body or chunk bytes still to come
	response bool
	noBody   bool // the response answers a HEAD request
	isHead   bool // the request just walked is a HEAD
	close    bool // the message asked for the connection to close
}

// next readies the framer for the next message. noBody: the response to
// come answers a HEAD request.
func (f *framer) next(noBody bool) {
	*f = framer{response: f.response, noBody: noBody}
}

// advance walks p from the framer's position: n bytes of p belong to the
// current message; done when the message ended at p[n].
func (f *framer) advance(p []byte) (n int, done bool, err error) {
	for n < len(p) || f.st == inDone {
		switch f.st {
		case inDone:
			return n, true, nil
		case inHead:
			end := bytes.Index(p[n:], []byte("\r\n\r\n"))
			if end < 0 {
				return n, false, nil
			}
			if err := f.head(p[n : n+end+2]); err != nil {
				return n, false, err
			}
			n += end + 4
		case inFixedBody:
			if n += f.take(len(p) - n); f.left == 0 {
				f.st = inDone
			}
		case inChunkSize, inTrailer:
			eol := bytes.IndexByte(p[n:], '\n')
			if eol < 0 {
				return n, false, nil
			}
			line := p[n : n+eol+1]
			n += eol + 1
			if err := f.line(line); err != nil {
				return n, false, err
			}
		case inChunkData:
			if n += f.take(len(p) - n); f.left == 0 {
				f.st = inChunkEnd
			}
		case inChunkEnd:
			if len(p)-n < 2 {
				return n, false, nil
			}
			if p[n] != '\r' || p[n+1] != '\n' {
				return n, false, errFraming
			}
			n += 2
			f.st = inChunkSize
		}
	}
	return n, false, nil
}

// take counts up to avail body bytes off left and returns how many.
func (f *framer) take(avail int) int {
	k := min(int64(avail), f.left)
	f.left -= k
	return int(k)
}

// head reads the framing fields of a head (start line and fields, each
// ending in CRLF, without the empty line).
func (f *framer) head(h []byte) error {
	eol := bytes.Index(h, []byte("\r\n"))
	start := h[:eol]
	status := 0
	if f.response {
		// "HTTP/1.1 200 OK"
		if len(start) < 12 || !bytes.HasPrefix(start, []byte("HTTP/1.")) || start[8] != ' ' {
			return errFraming
		}
		for _, c := range start[9:12] {
			if c < '0' || c > '9' {
				return errFraming
			}
			status = status*10 + int(c-'0')
		}
	} else {
		f.isHead = bytes.HasPrefix(start, []byte("HEAD "))
	}
	cl, chunked, haveCL := int64(0), false, false
	for rest := h[eol+2:]; len(rest) > 0; {
		eol := bytes.Index(rest, []byte("\r\n"))
		line := rest[:eol]
		rest = rest[eol+2:]
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return errFraming
		}
		name, value := line[:colon], bytes.TrimSpace(line[colon+1:])
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			v, ok := decimal(value)
			if !ok || (haveCL && v != cl) {
				return errFraming
			}
			cl, haveCL = v, true
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			if !bytes.EqualFold(value, []byte("chunked")) || chunked {
				return errFraming
			}
			chunked = true
		case bytes.EqualFold(name, []byte("Connection")):
			if bytes.EqualFold(value, []byte("close")) {
				f.close = true
			}
		}
	}
	if chunked && haveCL {
		return errFraming
	}
	switch {
	case f.response && status >= 100 && status < 200:
		// An interim response: the final one follows.
		f.st = inHead
		return nil
	case f.response && (f.noBody || status == 204 || status == 304):
		f.st = inDone
	case chunked:
		f.st = inChunkSize
	case haveCL && cl > 0:
		f.st, f.left = inFixedBody, cl
	case haveCL || !f.response:
		f.st = inDone
	default:
		// A response delimited by the connection's close: not kept alive,
		// so out of this instrument's scope.
		return errFraming
	}
	return nil
}

// line reads a chunk-size line or a trailer line (with its LF).
func (f *framer) line(line []byte) error {
	line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
	if f.st == inTrailer {
		if len(line) == 0 {
			f.st = inDone
		}
		return nil
	}
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = line[:i]
	}
	line = bytes.TrimSpace(line)
	if len(line) == 0 || len(line) > 15 {
		return errFraming
	}
	var size int64
	for _, c := range line {
		switch {
		case c >= '0' && c <= '9':
			size = size<<4 | int64(c-'0')
		case c >= 'a' && c <= 'f':
			size = size<<4 | int64(c-'a'+10)
		case c >= 'A' && c <= 'F':
			size = size<<4 | int64(c-'A'+10)
		default:
			return errFraming
		}
	}
	if size == 0 {
		f.st = inTrailer
	} else {
		f.st, f.left = inChunkData, size
	}
	return nil
}

// decimal parses a Content-Length value: digits only, at most 18.
func decimal(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var v int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	return v, true
}

// answered is what every design does once an answer has ended: bytes the
// engine sent past it end the connection (errTrailing), the request's
// Connection: close ends it (errClosed), and otherwise the request side is
// readied for the next request. closeEngine: the answer asked to close the
// engine connection (the next request dials anew).
func answered(req, resp *pipe) (closeEngine bool, err error) {
	if resp.pending() {
		return false, errTrailing
	}
	if req.f.close {
		return resp.f.close, errClosed
	}
	req.f.next(false)
	return resp.f.close, nil
}

// pipe is one direction of a proxied connection: bytes read into buf,
// walked by the framer up to p, written on up to r.
//
//	buf[:r] written on · buf[r:p] walked, to write · buf[p:w] read, not walked
type pipe struct {
	buf     []byte
	r, p, w int
	f       framer
}

func newPipe(size int, response bool) *pipe {
	return &pipe{buf: make([]byte, size), f: framer{response: response}}
}

// walk advances the framer over the bytes read: done when the current
// message ended (the bytes after it stay unwalked for the next one).
func (q *pipe) walk() (bool, error) {
	n, done, err := q.f.advance(q.buf[q.p:q.w])
	q.p += n
	return done, err
}

// out is what is walked and not yet written on.
func (q *pipe) out() []byte { return q.buf[q.r:q.p] }

// wrote records n bytes of out written on.
func (q *pipe) wrote(n int) {
	q.r += n
	if q.r == q.w {
		q.r, q.p, q.w = 0, 0, 0
	}
}

// space is where the next read goes; it moves the unwritten bytes to the
// front when the tail is full, and fails when a head or line fills the
// whole buffer.
func (q *pipe) space() ([]byte, error) {
	if q.w == len(q.buf) {
		if q.r == 0 {
			return nil, errTooLong
		}
		q.w = copy(q.buf, q.buf[q.r:q.w])
		q.p -= q.r
		q.r = 0
	}
	return q.buf[q.w:], nil
}

// filled records n bytes read into space.
func (q *pipe) filled(n int) { q.w += n }

// pending says whether bytes past the walked ones wait (a pipelined
// request, or an engine's stray bytes).
func (q *pipe) pending() bool { return q.p < q.w }
