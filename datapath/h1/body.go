package h1

import (
	"bufio"
	"errors"
	"io"
	"net/http"
)

// errMalformedChunked is a chunked request body that breaks RFC 9112 §7.1:
// the connection is closed after the response, since its framing is lost.
var errMalformedChunked = errors.New("malformed chunked request body")

// maxChunkLine bounds a chunk-size line (size and extensions) and each
// trailer line.
const maxChunkLine = 4 << 10

// body is a request body framed by Content-Length (n bytes left) or by
// chunked coding. It reads from the connection's buffer; the handler must
// not use it after ServeHTTP returned.
type body struct {
	c           *conn
	n           int64 // Content-Length: bytes left; chunked: bytes left in this chunk
	err         error // sticky failure
	chunked     bool
	started     bool // chunked: the first size line was read
	done        bool // read to its end (the connection may carry the next request)
	closed      bool
	continue100 bool // answer "100 Continue" on the first read
}

func (b *body) Read(p []byte) (int, error) {
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	if b.err != nil {
		return 0, b.err
	}
	if b.done {
		return 0, io.EOF
	}
	if b.continue100 {
		b.continue100 = false
		b.c.writeContinue()
	}
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var err error
	if b.chunked {
		n, err = b.readChunked(p)
	} else {
		n, err = b.readLength(p)
	}
	if err != nil && err != io.EOF {
		b.err = err
	}
	if b.done {
		b.c.releaseReader()
	}
	return n, err
}

func (b *body) readLength(p []byte) (int, error) {
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	n, err := b.c.br.Read(p)
	b.n -= int64(n)
	if b.n == 0 {
		b.done = true
		return n, io.EOF
	}
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *body) readChunked(p []byte) (int, error) {
	br := b.c.br
	if b.n == 0 {
		if b.started {
			if err := expectCRLF(br); err != nil { // the previous chunk's end
				return 0, err
			}
		}
		b.started = true
		size, err := readChunkSize(br)
		if err != nil {
			return 0, err
		}
		if size == 0 {
			if err := skipTrailers(br); err != nil {
				return 0, err
			}
			b.done = true
			return 0, io.EOF
		}
		b.n = size
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	n, err := br.Read(p)
	b.n -= int64(n)
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// Close marks the body closed; what was not read is dealt with by the
// connection (drained when already buffered, else the connection closes).
func (b *body) Close() error {
	b.closed = true
	return nil
}

// readChunkSize reads one chunk-size line: 1*HEXDIG, optional extensions
// (";" name [= value], never a control byte), CRLF.
func readChunkSize(br *bufio.Reader) (int64, error) {
	line, err := readCRLFLine(br)
	if err != nil {
		return 0, err
	}
	var size int64
	i := 0
	for ; i < len(line); i++ {
		d := unhex(line[i])
		if d < 0 {
			break
		}
		if i >= 15 {
			return 0, errMalformedChunked // over 2^60: no honest body is that long
		}
		size = size<<4 | int64(d)
	}
	if i == 0 {
		return 0, errMalformedChunked
	}
	ext := line[i:]
	for len(ext) > 0 && (ext[0] == ' ' || ext[0] == '\t') {
		ext = ext[1:] // BWS before an extension
	}
	if len(ext) > 0 && ext[0] != ';' {
		return 0, errMalformedChunked
	}
	for _, c := range ext {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return 0, errMalformedChunked
		}
	}
	return size, nil
}

// skipTrailers reads the trailer section up to its empty line; the fields
// are checked as header lines and dropped.
func skipTrailers(br *bufio.Reader) error {
	for n := 0; ; n++ {
		line, err := readCRLFLine(br)
		if err != nil {
			return err
		}
		if len(line) == 0 {
			return nil
		}
		if n >= maxFields || !validFieldLine(line) {
			return errMalformedChunked
		}
	}
}

// validFieldLine reports whether line is "token: value" with no control
// byte and no obs-fold.
func validFieldLine(line []byte) bool {
	colon := -1
	for i, c := range line {
		if c == ':' {
			colon = i
			break
		}
		if !tokenChar[c] {
			return false
		}
	}
	if colon <= 0 {
		return false
	}
	for _, c := range line[colon+1:] {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// readCRLFLine returns one line without its CRLF (valid until the next
// read); a bare LF or a line over maxChunkLine is malformed.
func readCRLFLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, errMalformedChunked
		}
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	if len(line) > maxChunkLine || len(line) < 2 || line[len(line)-2] != '\r' {
		return nil, errMalformedChunked
	}
	line = line[:len(line)-2]
	for _, c := range line {
		if c == '\r' {
			return nil, errMalformedChunked
		}
	}
	return line, nil
}

// expectCRLF consumes the CRLF that ends a chunk's data.
func expectCRLF(br *bufio.Reader) error {
	cr, err := br.ReadByte()
	if err == nil && cr != '\r' {
		return errMalformedChunked
	}
	if err == nil {
		var lf byte
		lf, err = br.ReadByte()
		if err == nil && lf != '\n' {
			return errMalformedChunked
		}
	}
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return err
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// buffered reports whether the whole body is in the connection's read
// buffer (a Content-Length body): reading it never touches the socket.
func (b *body) buffered() bool {
	return !b.chunked && b.err == nil && b.n <= int64(b.c.br.Buffered())
}

// drainBuffered consumes the rest of an unread body when it is already in
// the connection's buffer (a small body the handler answered without
// reading), so the connection can carry the next request; false means it
// cannot be reused.
func (b *body) drainBuffered() bool {
	if b.done {
		return true
	}
	if b.err != nil || b.chunked {
		return false
	}
	if b.n > int64(b.c.br.Buffered()) {
		return false
	}
	_, _ = b.c.br.Discard(int(b.n))
	b.n = 0
	b.done = true
	return true
}
