package upstream

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Why a second body decoder: Stream (stream.go) is handed the socket's
// bytes as they arrive, from inside the poll wait, and may not block to
// read more; httputil's chunked reader pulls from a bufio.Reader. This one
// is pushed bytes, keeps its place between pushes (a chunk's size line,
// data or CRLF split across reads) and decodes in place. It accepts what
// the chunked reader and readHeadLine accept (size lines of hex digits,
// optional extension after ';', trailing whitespace, CRLF and no other CR;
// data followed by exactly CRLF; trailers, ending in LF or CRLF, dropped up
// to the empty line).

// errBadChunk marks chunked framing that does not decode.
var errBadChunk = errors.New("malformed chunked encoding")

// Bounds on the lines of the chunked framing: a size line as httputil's
// (4 KiB), a trailer line as a head line (the connection's buffer).
const (
	maxChunkLine   = 4 << 10
	maxTrailerLine = bufSize
)

type frameKind uint8

const (
	frameChunked frameKind = iota
	frameLength            // Content-Length: left bytes
	frameClose             // until the engine closes
)

type chunkState uint8

const (
	csSize        chunkState = iota // the size's hex digits
	csSizeRest                      // after the digits: whitespace or extension, to LF
	csData                          // left bytes of chunk data
	csDataCR                        // the CR after the data
	csDataLF                        // the LF after the data
	csTrailer                       // the start of a trailer line (after the last chunk)
	csTrailerCR                     // a CR at the start of a trailer line
	csTrailerLine                   // inside a trailer line, to LF
	csDone
)

// frameDecoder decodes one body's framing from bytes pushed to it.
type frameDecoder struct {
	kind   frameKind
	state  chunkState
	left   uint64 // frameLength: body bytes left; chunked: the chunk's
	digits int    // hex digits of the size read so far
	line   int    // bytes of the size or trailer line so far
	ext    bool   // in a chunk extension
	ws     bool   // whitespace after the size's digits
	cr     bool   // the size line's CR: its LF must follow
}

// decode decodes p in place: data is the body bytes of p, left where they
// lie when they are one run (the usual read: one chunk, one event), else
// gathered where the first run lies; done reports that the body ended, extra how many bytes of p
// followed its end (bytes the engine sent past its answer). With an error,
// data is what p held before the bad framing (the Read path hands it on
// too, before it fails).
func (d *frameDecoder) decode(p []byte) (data []byte, done bool, extra int, err error) {
	if d.kind == frameChunked && d.state == csSize && d.digits == 0 {
		// The usual read: one whole chunk (one event), nothing after it.
		if data, ok := oneChunk(p); ok {
			return data, false, 0, nil
		}
	}
	switch d.kind {
	case frameClose:
		return p, false, 0, nil
	case frameLength:
		n := uint64(len(p))
		if n >= d.left {
			n, done = d.left, true
		}
		d.left -= n
		return p[:n], done, len(p) - int(n), nil
	}
	// The body bytes decoded so far are p[start:out]. Why not moved to
	// p's front: with one chunk per read that move was a copy of every
	// event, and most of the decoder's own time.
	start, out, i := 0, 0, 0
	for i < len(p) {
		b := p[i]
		switch d.state {
		case csSize:
			if d.digits == 0 {
				if at, n, next, ok := wholeChunk(p, i); ok {
					switch {
					case out == start: // the first run: leave it where it is
						start, out = at, at
					case out != at:
						copy(p[out:], p[at:at+n])
					}
					out += n
					i = next
					continue
				}
			}
			if v, ok := hexDigit(b); ok {
				if d.digits == 16 {
					return p[start:out], false, 0, fmt.Errorf("%w: chunk length too large", errBadChunk)
				}
				d.left = d.left<<4 | v
				d.digits++
				d.line++
				i++
				continue
			}
			if d.digits == 0 {
				return p[start:out], false, 0, fmt.Errorf("%w: invalid byte %q in chunk length", errBadChunk, b)
			}
			d.state = csSizeRest // b is looked at there
		case csSizeRest:
			i++
			d.line++
			if d.line > maxChunkLine {
				return p[start:out], false, 0, fmt.Errorf("%w: chunk size line too long", errBadChunk)
			}
			switch {
			case d.cr:
				if b != '\n' {
					return p[start:out], false, 0, fmt.Errorf("%w: CR inside a chunk size line", errBadChunk)
				}
				d.state = csData
				if d.left == 0 {
					d.state = csTrailer
				}
				d.digits, d.line, d.ext, d.ws, d.cr = 0, 0, false, false, false
			case b == '\r':
				d.cr = true
			case b == '\n':
				return p[start:out], false, 0, fmt.Errorf("%w: chunk size line ends with a bare LF", errBadChunk)
			case d.ext:
			case b == ';' && !d.ws:
				d.ext = true
			case b == ' ' || b == '\t':
				d.ws = true
			default:
				return p[start:out], false, 0, fmt.Errorf("%w: invalid byte %q after chunk length", errBadChunk, b)
			}
		case csData:
			n := len(p) - i
			if uint64(n) > d.left {
				n = int(d.left)
			}
			switch {
			case out == start: // the first run: leave it where it is
				start, out = i, i
			case out != i:
				copy(p[out:], p[i:i+n])
			}
			out += n
			i += n
			d.left -= uint64(n)
			if d.left == 0 {
				d.state = csDataCR
			}
		case csDataCR, csDataLF:
			want, next := byte('\r'), csDataLF
			if d.state == csDataLF {
				want, next = '\n', csSize
			}
			if b != want {
				return p[start:out], false, 0, fmt.Errorf("%w: no CRLF after chunk data", errBadChunk)
			}
			d.state = next
			i++
		case csTrailer, csTrailerCR:
			i++
			switch {
			case b == '\n':
				d.state = csDone
				return p[start:out], true, len(p) - i, nil
			case b == '\r' && d.state == csTrailer:
				d.state = csTrailerCR
			default:
				d.state, d.line = csTrailerLine, 1
			}
		case csTrailerLine:
			i++
			d.line++
			if d.line > maxTrailerLine {
				return p[start:out], false, 0, fmt.Errorf("%w: trailer line too long", errBadChunk)
			}
			if b == '\n' {
				d.state = csTrailer
			}
		case csDone:
			return p[start:out], true, len(p) - i, nil
		}
	}
	return p[start:out], false, 0, nil
}

// wholeChunk reads the chunk at p[i:] in one step when all of it is
// there in its plainest form: 1 to 16 hex digits, CRLF, a non-zero size
// of data, CRLF. Why: an SSE engine's read is one such chunk (one event),
// and the byte-by-byte states cost a tenth of the relay's instructions
// per event. Anything else (an extension, whitespace, the last chunk, a
// chunk split across reads, bad framing) is left to decode's states,
// which see the same bytes from the same place, so what is accepted and
// refused does not change. at and n locate the data, next follows the
// chunk's CRLF.
func wholeChunk(p []byte, i int) (at, n, next int, ok bool) {
	size, digits := chunkSize(p[i:])
	j := i + digits
	at = j + 2
	if digits == 0 || size == 0 || at > len(p) || binary.LittleEndian.Uint16(p[j:]) != crlf {
		return 0, 0, 0, false
	}
	if size > uint64(len(p)-at) || uint64(len(p)-at)-size < 2 {
		return 0, 0, 0, false
	}
	n = int(size)
	if binary.LittleEndian.Uint16(p[at+n:]) != crlf {
		return 0, 0, 0, false
	}
	return at, n, at + n + 2, true
}

// oneChunk is wholeChunk for a p that is one chunk and nothing else (an
// SSE engine's usual read: one event): its data, and whether p is such a
// chunk. Why apart: with the chunk's end fixed at p's, the size is
// checked by one comparison with the bytes between the CRLFs, not
// located by the bounds arithmetic of wholeChunk, and two values come
// back instead of four: ~45 instructions an event against ~150 with
// decode's own (callgrind, irsse.sh).
func oneChunk(p []byte) ([]byte, bool) {
	size, digits := chunkSize(p)
	end := len(p) - 2 // the data's CRLF
	at := digits + 2
	if digits == 0 || size == 0 || end < at || uint64(end-at) != size ||
		binary.LittleEndian.Uint16(p[digits:]) != crlf || binary.LittleEndian.Uint16(p[end:]) != crlf {
		return nil, false
	}
	return p[at:end], true
}

// chunkSize reads the hex digits at p's start, at most 16: their value
// and how many there are (0: none).
func chunkSize(p []byte) (size uint64, digits int) {
	for end := min(len(p), 16); digits < end; digits++ {
		v := hexValue[p[digits]]
		if v > 15 {
			break
		}
		size = size<<4 | uint64(v)
	}
	return size, digits
}

// crlf is "\r\n" read as a little-endian uint16.
const crlf = '\n'<<8 | '\r'

// complete reports whether the body may end where the engine closed: only
// a body framed by the close itself.
func (d *frameDecoder) complete() bool { return d.kind == frameClose }

// hexValue is each byte's value as a hex digit, 0xff for no digit: one
// load per digit in wholeChunk instead of hexDigit's comparisons.
const hexValue = "" +
	"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff" +
	"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff" +
	"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff" +
	"\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\xff\xff\xff\xff\xff\xff" +
	"\xff\x0a\x0b\x0c\x0d\x0e\x0f\xff\xff\xff\xff\xff\xff\xff\xff\xff" +
	"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff" +
	"\xff\x0a\x0b\x0c\x0d\x0e\x0f\xff\xff\xff\xff\xff\xff\xff\xff\xff" +
	"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff" +
	"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff" +
	"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff" +
	"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff" +
	"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff" +
	"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff" +
	"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff" +
	"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff" +
	"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"

// hexDigit is b's value as a hex digit.
func hexDigit(b byte) (uint64, bool) {
	switch {
	case '0' <= b && b <= '9':
		return uint64(b - '0'), true
	case 'a' <= b && b <= 'f':
		return uint64(b-'a') + 10, true
	case 'A' <= b && b <= 'F':
		return uint64(b-'A') + 10, true
	}
	return 0, false
}
