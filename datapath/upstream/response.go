package upstream

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"strconv"
	"strings"
	"unsafe"

	"github.com/infergate/infergate/datapath/hop"
)

// Why not http.ReadResponse: it goes through net/textproto and its transfer
// layer, which on the proxy's hot path cost about as much CPU as the rest of
// the handler (header map growth, per-line allocations, a body wrapper with
// its own mutex). Engines answer HTTP/1.1 with a handful of headers, so a
// direct parse of the head off the connection's bufio.Reader is enough; the
// chunked decoder is net/http's own (httputil.NewChunkedReader).

// errBadResponse marks an engine response head that does not parse.
var errBadResponse = errors.New("malformed HTTP response")

// internHeader returns the interned spelling of the header names engines
// send (canonical, and the lowercase spelling uvicorn and other ASGI
// servers use), so parsing them allocates no key strings, and the name's
// bit (0: not one of them). Why a switch, not a map: the compiler turns it
// into a jump on the length and a few comparisons, with no hash of the
// name (a map lookup per field was the largest part of the head's parse).
func internHeader(name string) (string, uint16) {
	switch name {
	case headerContentType, "content-type":
		return headerContentType, bitContentType
	case headerContentLength, "content-length":
		return headerContentLength, bitContentLength
	case headerTE, "transfer-encoding":
		return headerTE, bitTE
	case headerConnection, "connection":
		return headerConnection, bitConnection
	case "Date", "date":
		return "Date", bitDate
	case "Server", "server":
		return "Server", bitServer
	case "Keep-Alive", "keep-alive":
		return "Keep-Alive", bitKeepAlive
	case "Cache-Control", "cache-control":
		return "Cache-Control", bitCacheControl
	case "Content-Encoding", "content-encoding":
		return "Content-Encoding", bitContentEncoding
	case "Vary", "vary":
		return "Vary", bitVary
	case "Trailer", "trailer":
		return "Trailer", bitTrailer
	case headerRequestID, "x-request-id":
		return headerRequestID, bitRequestID
	case "X-Accel-Buffering", "x-accel-buffering":
		return "X-Accel-Buffering", bitAccelBuffering
	}
	return "", 0
}

// The bits of the interned header names (internHeader), one each: a head
// records the names it held, so that a name's first field is stored
// without looking for an earlier one, and frameBody looks up only the
// framing fields that came.
const (
	bitContentType uint16 = 1 << iota
	bitContentLength
	bitTE
	bitConnection
	bitDate
	bitServer
	bitKeepAlive
	bitCacheControl
	bitContentEncoding
	bitVary
	bitTrailer
	bitRequestID
	bitAccelBuffering

	// framingBits are the fields frameBody reads.
	framingBits = bitContentLength | bitTE | bitConnection
	// hopBits are the interned names among hop.Headers.
	hopBits = bitTE | bitConnection | bitKeepAlive | bitTrailer
)

// readResponse parses one response head from br and frames its body the way
// net/http would: no body for 1xx/204/304 and HEAD, chunked, Content-Length,
// or until the engine closes (then Close is set). The returned reader yields
// the body; it ends with io.EOF only when the body is complete (a short
// Content-Length or chunked body ends with io.ErrUnexpectedEOF).
//
// Headers go into h when it is not nil (see Leg.Into), else into a
// new map.
func readResponse(br *bufio.Reader, method string, h http.Header) (*http.Response, io.Reader, error) {
	ur := new(response)
	body, err := readResponseInto(ur, br, method, h)
	if err != nil {
		return nil, nil, err
	}
	return &ur.resp, body, nil
}

// readResponseInto is readResponse into ur's storage, which must be zero
// (new): the response is ur.resp, single header values share ur.vals, a
// Content-Length body is framed by ur.lb and a head that fits is copied
// into ur.head, so one engine response is one allocation.
func readResponseInto(ur *response, br *bufio.Reader, method string, h http.Header) (io.Reader, error) {
	return readParsed(ur, br, method, h, false)
}

// readResponseFields is readResponseInto for Leg.Fields: the head's fields
// go to ur.body.fields as name, value pairs, and h (the client's map,
// which must not be nil) is resp.Header untouched, unless the head needs
// the map (needsMap): then it is parsed into h as readResponseInto would,
// and ur.body.fields stays nil.
func readResponseFields(ur *response, br *bufio.Reader, method string, h http.Header) (io.Reader, error) {
	return readParsed(ur, br, method, h, true)
}

// readParsed reads a head off br (readHead) and parses it into ur
// (parseHead; pairs: as readResponseFields).
func readParsed(ur *response, br *bufio.Reader, method string, h http.Header, pairs bool) (io.Reader, error) {
	var head scannedHead
	if err := readHead(br, &ur.head, &head); err != nil {
		return nil, err
	}
	return parseHead(ur, br, &head, method, h, pairs)
}

// maxLineEnds is how many line ends a head's scan keeps for its parse
// (scannedHead.ends). An engine's answer head is 5–8 lines; the lines of a
// longer one past these are found by a search of their own.
const maxLineEnds = 16

// scannedHead is a response head read off the connection. text holds it,
// status line to the empty line that ends it (line ends included): the
// status line and every header value and name are cut from it. lines
// counts its lines, the empty one included. ends holds the offsets in
// text of the LFs that end its first nEnds lines (at most maxLineEnds;
// the empty line's is not recorded), as the scan that found the head's
// end met them: the parse cuts those lines without looking for their
// ends again (cutLine's second search, ~240 instructions of a six-line
// answer).
type scannedHead struct {
	text  string
	lines int
	nEnds int
	ends  [maxLineEnds]int
}

// readHead reads the response head off br into head. The usual head is
// whole in br's buffer after one read, and is then found by one scan of
// the buffer, which records its line ends, and copied once, into room
// when it fits (headString); one that is not is read line by line, and
// its line ends are not recorded.
func readHead(br *bufio.Reader, room *[headRoom]byte, head *scannedHead) error {
	if br.Buffered() == 0 {
		if _, err := br.Peek(1); err != nil {
			return err // as readHeadLine: nothing read, the error as is
		}
	}
	b, _ := br.Peek(br.Buffered())
	if n, lines := headEnd(b, &head.ends); n > 0 {
		head.text = headString(b[:n], room)
		head.lines, head.nEnds = lines, min(lines-1, maxLineEnds)
		_, _ = br.Discard(n)
		return nil
	}
	var err error
	head.text, head.lines, err = readHeadLines(br)
	return err
}

// headRoom is the size of a response's own room for its head
// (response.head): uvicorn's usual answer heads (vLLM's, SGLang's; date,
// server, content-length or transfer-encoding, content-type) take 120–150
// bytes, one with an echoed request id and a stream's cache-control up to
// ~230. 295: the rest of the 768-byte size class the response then fills
// with the runtime's 8-byte header of an object over 512 bytes
// (TestResponseSizeClass). Against the three objects it replaces (416,
// and 192 or more each for the head and a fifth field's values), an
// answer of five or six fields takes fewer bytes, a four-field one ~200
// more while its exchange lasts.
const headRoom = 295

// headString is b as a string copied into room when it fits, else into a
// string of its own. Why room: the head string was an allocation of its
// own per answer (~270 instructions with its copy, and a size class of
// garbage); room is part of the response the exchange allocates anyway.
// The safety the copy exists for is kept: room belongs to one response,
// which is new for each answer and never recycled, so room is written
// once, here, and the head's strings (kept by header maps, hooks, logs,
// P/D bookkeeping) never see it change. A string kept keeps the whole
// response alive, as the header map's values (slices of its vals) already
// did. room holds no pointers and is the response's last field, so the
// collector does not scan it.
func headString(b []byte, room *[headRoom]byte) string {
	if len(b) > len(room) || len(b) == 0 {
		return string(b)
	}
	n := copy(room[:], b)
	return unsafe.String(&room[0], n)
}

// headEnd returns the length of the head at the start of b, through the
// empty line (LF or CRLF) that ends it, and its number of lines; 0 when b
// does not hold all of it. The first line is the status line, never the
// end, whatever it holds. The offset of each line's LF goes to ends, as
// far as it holds them (the empty line's is not needed: its line is the
// last).
func headEnd(b []byte, ends *[maxLineEnds]int) (n, lines int) {
	i := bytes.IndexByte(b, '\n')
	for lines = 1; i >= 0; lines++ {
		if lines <= len(ends) {
			ends[lines-1] = i
		}
		switch next := i + 1; {
		case next < len(b) && b[next] == '\n':
			return next + 1, lines + 1
		case next+1 < len(b) && b[next] == '\r' && b[next+1] == '\n':
			return next + 2, lines + 1
		}
		j := bytes.IndexByte(b[i+1:], '\n')
		if j < 0 {
			break
		}
		i += 1 + j
	}
	return 0, 0
}

// readHeadLines is readHead for a head that is not whole in the buffer:
// line by line (readHeadLine's rules: a line longer than the buffer is an
// error, an end of stream inside a line io.ErrUnexpectedEOF), copied into
// one buffer. A header line without a valid name fails as it comes, as
// parseHead would fail it, so a bad head reads the same error whether it
// came in one read or in many.
func readHeadLines(br *bufio.Reader) (string, int, error) {
	var buf []byte
	for lines := 1; ; lines++ {
		raw, err := br.ReadSlice('\n')
		if err != nil {
			return "", 0, headLineErr(raw, err)
		}
		buf = append(buf, raw...)
		if lines == 1 {
			continue // the status line, checked once the head is read
		}
		l := raw[:len(raw)-1]
		if n := len(l); n > 0 && l[n-1] == '\r' {
			l = l[:n-1]
		}
		if len(l) == 0 {
			return string(buf), lines, nil
		}
		if i := bytes.IndexByte(l, ':'); i <= 0 || !validHeaderKey(string(l[:i])) {
			return "", 0, fmt.Errorf("%w: header line %q", errBadResponse, l)
		}
	}
}

// parseHead parses head (readHead's) into ur and frames the body that
// follows it in br. pairs: the fields go to ur.body.fields, not into h
// (readResponseFields).
func parseHead(ur *response, br *bufio.Reader, head *scannedHead, method string, h http.Header, pairs bool) (io.Reader, error) {
	text, ends, lines := head.text, head.ends[:head.nEnds], head.lines
	end := lineEnd(text, 0, ends, 0)
	statusLine, start := trimCR(text[:end]), end+1
	into := h != nil
	if !into {
		h = make(http.Header, lines-2)
	}
	vals := ur.vals[:] // one backing array for the usual single values
	if pairs {
		// Two strings a field, and room for the two the datapath may
		// add (the client's request id) without growing.
		vals = ur.vals[:0]
		if n := 2*(lines-2) + 2; n > cap(vals) {
			vals = make([]string, 0, n)
		}
	} else if lines-2 > len(vals) {
		vals = make([]string, lines-2)
	}
	nv := 0
	var seen, again uint16
	other := false // a field of a name without a bit was stored
	var cl string  // the first Content-Length value (frameBody)
	// The fields: every line but the status line and the empty one.
	for k := 1; k < lines-1; k++ {
		end = lineEnd(text, start, ends, k)
		l := trimCR(text[start:end])
		start = end + 1
		i := strings.IndexByte(l, ':')
		if i <= 0 {
			return nil, fmt.Errorf("%w: header line %q", errBadResponse, l)
		}
		// An interned name is one of internHeader's spellings, all
		// tokens: only the others are checked byte by byte.
		key, bit := internHeader(l[:i])
		if bit == 0 {
			valid, canonical := tokenCanonical(l[:i])
			if !valid {
				return nil, fmt.Errorf("%w: header line %q", errBadResponse, l)
			}
			// A canonical spelling is its own key (what
			// CanonicalMIMEHeaderKey would return, without its second
			// walk), and has no bit: internHeader holds the canonical
			// spelling of every interned name. Another spelling of an
			// interned name gets its bit here.
			key = l[:i]
			if !canonical {
				key, bit = internOr(textproto.CanonicalMIMEHeaderKey(key))
			}
		}
		// Before anything is skipped: a hop name in any spelling marks
		// the head (HopFree).
		if bit&hopBits != 0 || bit == 0 && hop.IsHeader(key) {
			ur.hopField = true
		}
		if into && bit == bitRequestID {
			continue // into the client's map: the client's id stays, alone
		}
		v := trimOWS(l[i+1:])
		if pairs {
			// The bits alone: which framing fields came, and how many
			// Content-Lengths (needsMap).
			if seen&bit == 0 {
				seen |= bit
				if bit == bitContentLength {
					cl = v
				}
			} else {
				again |= bit
			}
			vals = append(vals, key, v)
			continue
		}
		// The name's first field needs no lookup: h holds none of it (a
		// new map, or Leg.Into, which holds only the request id). Each
		// interned name has its bit; of the others only the first field
		// stored is known to be new.
		first := bit == 0 && !other || bit != 0 && seen&bit == 0
		if bit == 0 {
			other = true
		} else if first {
			seen |= bit
			if bit == bitContentLength {
				cl = v
			}
		} else {
			again |= bit
		}
		if !first {
			if prior, ok := h[key]; ok {
				h[key] = append(prior, v)
				continue
			}
		}
		vals[nv] = v
		h[key] = vals[nv : nv+1 : nv+1]
		nv++
	}
	if pairs {
		if needsMap(ur.hopField, seen, again, cl) {
			// Parsed again into h: the one parse that strips hop fields
			// and compares Content-Lengths (a rare head).
			return parseHead(ur, br, head, method, h, false)
		}
		ur.body.fields = vals
	}
	if again&bitContentLength != 0 {
		cl = "" // more than one: frameBody compares them in h
	}

	resp := &ur.resp // zero: set field by field, not cleared again
	if !parseStatusLine(resp, statusLine) {
		return nil, fmt.Errorf("%w: status line %q", errBadResponse, statusLine)
	}
	resp.Header = h
	return frameBody(br, method, resp, &ur.lb, seen, cl)
}

// parseStatusLine sets resp's protocol and status from an engine's status
// line, and reports whether it is one: a version http.ParseHTTPVersion
// reads, a space, a three-digit code of 100 or more, and then nothing or
// a space and the reason. Why not strings.Cut, ParseHTTPVersion and
// strconv.Atoi as before: every engine answers HTTP/1.1 or HTTP/1.0, each
// compared whole where its first space must be, and three digits are
// read in place (~100 instructions an answer, callgrind).
func parseStatusLine(resp *http.Response, line string) bool {
	var proto, status string
	var major, minor int
	if len(line) > 8 && line[8] == ' ' && (line[:8] == "HTTP/1.1" || line[:8] == "HTTP/1.0") {
		proto, status, major, minor = line[:8], line[9:], 1, int(line[7]-'0')
	} else {
		var ok bool
		if proto, status, ok = strings.Cut(line, " "); !ok {
			return false
		}
		if major, minor, ok = http.ParseHTTPVersion(proto); !ok {
			return false
		}
	}
	if len(status) < 3 || len(status) > 3 && status[3] != ' ' {
		return false
	}
	code, ok := statusCode(status[:3])
	if !ok {
		return false
	}
	resp.Status, resp.StatusCode = status, code
	resp.Proto, resp.ProtoMajor, resp.ProtoMinor = proto, major, minor
	return true
}

// statusCode reads a status code, three digits and 100 or more: the three
// bytes strconv.Atoi reads as 100 or more (with a sign, two digits are
// left, under 100).
func statusCode(s string) (int, bool) {
	a, b, c := s[0]-'0', s[1]-'0', s[2]-'0'
	if a == 0 || a > 9 || b > 9 || c > 9 {
		return 0, false
	}
	return int(a)*100 + int(b)*10 + int(c), true
}

// needsMap reports whether a head parsed as pairs (Leg.Fields) must go
// into the client's map after all: it held a hop-by-hop field (hopField;
// hop.Strip works on the map, and Connection may name any other field),
// more than one Content-Length (again's bit; frameBody compares them in
// the map), or one that is empty (cl, its value: frameBody reads an empty
// one from the map to refuse it). Either way the relay then handles the
// map as it always did. Why the pairs otherwise: a small answer's fields
// went into the map, were walked back out of it by the front end's head
// writer, and the map was cleared for the next request (the pairs save
// ~1,200 instructions of a four-field answer, callgrind).
func needsMap(hopField bool, seen, again uint16, cl string) bool {
	return hopField || again&bitContentLength != 0 || seen&bitContentLength != 0 && cl == ""
}

// internOr is internHeader's spelling and bit for a canonical key, or the
// key itself with no bit.
func internOr(key string) (string, uint16) {
	if k, bit := internHeader(key); bit != 0 {
		return k, bit
	}
	return key, 0
}

// lineEnd returns the offset of the LF that ends line k of a head's text,
// the line that starts at start: the head's scan recorded it (ends, of the
// first lines), or a search finds it (text ends in an LF).
func lineEnd(text string, start int, ends []int, k int) int {
	if k < len(ends) {
		return ends[k]
	}
	return searchLineEnd(text, start)
}

// searchLineEnd is lineEnd for a line the scan did not record: a call of
// its own, so that lineEnd is small enough to be inlined.
//
//go:noinline
func searchLineEnd(text string, start int) int {
	return start + strings.IndexByte(text[start:], '\n')
}

// trimCR is l without one CR at its end.
func trimCR(l string) string {
	if n := len(l); n > 0 && l[n-1] == '\r' {
		return l[:n-1]
	}
	return l
}

// frameBody sets ContentLength and Close and returns the body reader; a
// Content-Length body is framed by lb (the caller's storage). seen holds
// the bits of the framing fields the head held: one whose bit is not set
// is not looked up in resp.Header. cl, when not empty, is the value of
// the head's only Content-Length field (parseHead saw it go in): no
// lookup either.
func frameBody(br *bufio.Reader, method string, resp *http.Response, lb *lengthBody, seen uint16, cl string) (io.Reader, error) {
	h := resp.Header
	// HTTP/1.0 closes unless the engine asks to keep the connection alive.
	resp.Close = resp.ProtoMajor == 1 && resp.ProtoMinor == 0
	if seen&bitConnection != 0 {
		conn := h[headerConnection]
		resp.Close = hop.HasToken(conn, "close") || resp.Close && !hop.HasToken(conn, "keep-alive")
	}
	code := resp.StatusCode
	if code/100 == 1 || code == http.StatusNoContent || code == http.StatusNotModified ||
		method == http.MethodHead {
		return http.NoBody, nil
	}
	if seen&bitTE != 0 {
		if te := h[headerTE]; len(te) > 0 {
			if len(te) != 1 || !strings.EqualFold(te[0], "chunked") {
				return nil, fmt.Errorf("%w: unsupported transfer encoding %q", errBadResponse, te)
			}
			delete(h, headerTE) // as net/http: the framing is ours, not the header's
			delete(h, headerContentLength)
			resp.TransferEncoding = []string{"chunked"}
			resp.ContentLength = -1
			return &chunkedBody{cr: httputil.NewChunkedReader(br), br: br}, nil
		}
	}
	if cl != "" {
		n, err := parseLength(cl)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%w: Content-Length %q", errBadResponse, []string{cl})
		}
		return lengthFramed(br, resp, lb, n), nil
	}
	if seen&bitContentLength != 0 {
		if cl := h[headerContentLength]; len(cl) > 0 {
			n, err := parseLength(cl[0])
			for _, v := range cl[1:] {
				if v != cl[0] {
					err = errors.New("conflicting values")
				}
			}
			if err != nil || n < 0 {
				return nil, fmt.Errorf("%w: Content-Length %q", errBadResponse, cl)
			}
			return lengthFramed(br, resp, lb, n), nil
		}
	}
	resp.ContentLength = -1
	resp.Close = true // the end of the body is the end of the connection
	return br, nil
}

// lengthFramed sets resp's ContentLength to n and returns its body: n
// bytes of br, framed by lb.
func lengthFramed(br *bufio.Reader, resp *http.Response, lb *lengthBody, n int64) io.Reader {
	resp.ContentLength = n
	if n == 0 {
		return http.NoBody
	}
	*lb = lengthBody{r: br, n: n}
	return lb
}

// parseLength is strconv.ParseInt(s, 10, 64) for a Content-Length: the
// usual value, 1 to 18 digits (no overflow), in one loop; anything else
// (a sign, other bytes, more digits) by ParseInt itself.
func parseLength(s string) (int64, error) {
	if len(s) == 0 || len(s) > 18 {
		return strconv.ParseInt(s, 10, 64)
	}
	var n int64
	for i := 0; i < len(s); i++ {
		d := s[i] - '0'
		if d > 9 {
			return strconv.ParseInt(s, 10, 64)
		}
		n = n*10 + int64(d)
	}
	return n, nil
}

// readHeadLine returns one head line without its CRLF (valid until the next
// read); a line longer than the buffer is an error.
func readHeadLine(br *bufio.Reader) ([]byte, error) {
	l, err := br.ReadSlice('\n')
	if err != nil {
		return nil, headLineErr(l, err)
	}
	l = l[:len(l)-1]
	if n := len(l); n > 0 && l[n-1] == '\r' {
		l = l[:n-1]
	}
	return l, nil
}

// headLineErr is the error of a head line ReadSlice could not end: a line
// longer than the buffer, or an end of stream inside a line (l) is
// io.ErrUnexpectedEOF.
func headLineErr(l []byte, err error) error {
	if errors.Is(err, bufio.ErrBufferFull) {
		return fmt.Errorf("%w: header line too long", errBadResponse)
	}
	if errors.Is(err, io.EOF) && len(l) > 0 {
		return io.ErrUnexpectedEOF
	}
	return err
}

// trimOWS strips the optional whitespace around a header value. The
// usual value, one space before it and none after, is cut at once.
func trimOWS(v string) string {
	if n := len(v); n > 1 && v[0] == ' ' && v[1] > ' ' && v[n-1] > ' ' {
		return v[1:]
	}
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	return v
}

// tokenChars marks the bytes allowed in an RFC 9110 token (header names).
// Read-only after package initialisation.
var tokenChars = func() (t [256]bool) {
	for b := 0x21; b < 0x7f; b++ {
		t[b] = strings.IndexByte("\"(),/:;<=>?@[\\]{}", byte(b)) < 0
	}
	return t
}()

// tokenCanonical reports whether k is a non-empty RFC 9110 token (valid)
// and, if so, whether it is spelled as textproto.CanonicalMIMEHeaderKey
// spells it (canonical: then that function returns k itself). One walk
// for both, where validHeaderKey and CanonicalMIMEHeaderKey took one each,
// and one table lookup a byte (nameSteps), where tests of the byte's
// class and case took ~18 instructions.
func tokenCanonical(k string) (valid, canonical bool) {
	step, broke := wordStart, uint8(0)
	for i := 0; i < len(k); i++ {
		step = nameSteps[step&wordStart][k[i]]
		broke |= step
	}
	return len(k) > 0 && broke&notToken == 0, broke&(notToken|notCanonical) == 0
}

// The flags of a nameSteps entry.
const (
	wordStart    uint8 = 1 << iota // the byte was a hyphen: the next starts a word
	notToken                       // the byte is not a token byte
	notCanonical                   // the byte's case is not the canonical one where it is
)

// nameSteps is tokenCanonical's walk as a table: nameSteps[w][c] is what
// byte c does where w tells whether it starts a word (the name's first
// byte, one after a hyphen; canonically upper case there, lower case
// elsewhere). Read-only after package initialisation.
var nameSteps = func() (t [2][256]uint8) {
	for w := range 2 {
		for c := range 256 {
			lower, upper := 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z'
			switch {
			case !tokenChars[c]:
				t[w][c] = notToken
			case w == 1 && lower || w == 0 && upper:
				t[w][c] = notCanonical
			}
			if c == '-' {
				t[w][c] |= wordStart
			}
		}
	}
	return t
}()

// validHeaderKey reports whether k is a non-empty RFC 9110 token.
func validHeaderKey(k string) bool {
	for i := 0; i < len(k); i++ {
		if !tokenChars[k[i]] {
			return false
		}
	}
	return len(k) > 0
}

// lengthBody reads exactly n bytes; an earlier EOF is io.ErrUnexpectedEOF
// so a truncated body never looks complete.
type lengthBody struct {
	r io.Reader
	n int64
}

func (b *lengthBody) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	n, err := b.r.Read(p)
	b.n -= int64(n)
	if b.n <= 0 {
		return n, io.EOF
	}
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// chunkedBody decodes a chunked body and consumes the trailer section after
// the last chunk, leaving the connection at the next response.
type chunkedBody struct {
	cr   io.Reader
	br   *bufio.Reader
	done bool
}

func (b *chunkedBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n, err := b.cr.Read(p)
	if errors.Is(err, io.EOF) {
		for { // trailers (dropped) up to the empty line
			l, terr := readHeadLine(b.br)
			if terr != nil {
				if errors.Is(terr, io.EOF) {
					terr = io.ErrUnexpectedEOF
				}
				return n, terr
			}
			if len(l) == 0 {
				break
			}
		}
		b.done = true
	}
	return n, err
}
