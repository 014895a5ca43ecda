package h1

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math"
	"math/bits"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
	"unsafe"

	"golang.org/x/net/http/httpguts"

	"github.com/infergate/infergate/datapath/hop"
	"github.com/infergate/infergate/internal/swar"
)

// Limits of a request head. A request line or header line longer than
// MaxLine is refused (414 for the request line, 431 for a header), as is a
// head longer than the server's MaxHeaderBytes or with more than maxFields
// fields.
const (
	MaxLine              = 16 << 10
	DefaultMaxHeaderByte = 64 << 10
	maxFields            = 256
	maxLeadingCRLF       = 4 // empty lines ignored before a request line (RFC 9112 §2.2)
)

// Wire names the parser reads.
const (
	hdrHost             = "Host"
	hdrContentLength    = "Content-Length"
	hdrTransferEncoding = "Transfer-Encoding"
	hdrConnection       = "Connection"
	hdrExpect           = "Expect"
	hdrContentType      = "Content-Type"
	hdrDate             = "Date"
)

// requestError is a refused request head: the status to answer and why.
type requestError struct {
	status int
	msg    string
}

func (e *requestError) Error() string { return e.msg }

func badRequest(msg string) error { return &requestError{status: http.StatusBadRequest, msg: msg} }

// errNoRequest is a connection that ended (or idled out) between requests.
var errNoRequest = errors.New("no request")

// commonRequestHeaders are the canonical names clients send that the
// parser interns (internKey), so parsing them allocates no key.
var commonRequestHeaders = [...]string{
	hdrHost, hdrContentLength, hdrTransferEncoding, hdrConnection, hdrExpect, hdrContentType,
	"Accept", "Accept-Encoding", "Accept-Language", "Authorization", "User-Agent", "Cookie",
	"X-Request-Id", "X-Forwarded-For", "X-Api-Key", "X-Conversation-Id", "X-Model",
	"Cache-Control", "Origin", "Referer", "Upgrade", "Keep-Alive", "Te", "Trailer",
	"Openai-Organization", "Openai-Project", "Anthropic-Version", "X-Stainless-Lang",
}

// internSlot is one name of commonRequestHeaders in its two spellings,
// and whether it is a hop-by-hop name (hop.IsHeader).
type internSlot struct {
	canon, lower string
	hop          bool
}

// internTable holds commonRequestHeaders at internHash of their names: one
// slot and two string compares per field name, where a map lookup hashed
// the whole name (the lookup and its hash were ~10 % of parsing wrk's
// request head). Names that would share a slot keep the first comer; the
// others are canonicalised like any other name, which is only slower
// (TestInternTable holds every listed name to a slot of its own).
// Read-only after package initialisation.
var internTable = func() (t [internSlots]internSlot) {
	for _, k := range commonRequestHeaders {
		if s := &t[internHash(k)]; s.canon == "" {
			*s = internSlot{canon: k, lower: strings.ToLower(k), hop: hop.IsHeader(k)}
		}
	}
	return t
}()

const internSlots = 128 // a power of two: a slot plus one fits a byte (parsed.codes)

// internNames are internTable's canonical names by slot ("" for none),
// the names HeadList's codes index (less one). Read-only after package
// initialisation.
var internNames = func() (n [internSlots]string) {
	for i, s := range internTable {
		n[i] = s.canon
	}
	return n
}()

// internHash mixes a name's length and its first and last bytes, folded to
// lower case: collision-free over commonRequestHeaders.
func internHash(name string) int {
	return (len(name) + 4*int(name[0]|0x20) + int(name[len(name)-1]|0x20)) & (internSlots - 1)
}

// internKey returns name's canonical form and its slot when it is one of
// commonRequestHeaders, spelled canonically or in lower case.
func internKey(name string) (string, int, bool) {
	if name == "" {
		return "", 0, false
	}
	i := internHash(name)
	if s := &internTable[i]; name == s.canon || name == s.lower {
		return s.canon, i, true
	}
	return "", 0, false
}

// internSet is a set of internTable slots: the common names a head has
// carried so far.
type internSet [internSlots / 64]uint64

// add adds slot i and reports whether it was there already.
func (s *internSet) add(i int) bool {
	w, bit := &s[i>>6], uint64(1)<<(i&63)
	had := *w&bit != 0
	*w |= bit
	return had
}

// filter folds the set into a fieldFilter.
func (s *internSet) filter() fieldFilter {
	var f uint64
	for _, w := range s {
		f |= w
	}
	return fieldFilter(f | f>>32)
}

// fieldFilter is an internSet folded to 32 bits, slot i to bit i mod 32:
// a clear bit says none of its slots' names is in the set, a set bit only
// that one may be. Why not the set: it has to ride in the request state,
// which has 6 B to spare in its size class (TestReqStateSizeClass).
type fieldFilter uint32

// Fields is which of the common names (commonRequestHeaders) a request's
// head stored in its header map. Why: a handler looks up names most
// requests do not carry (a client's request id, a routing header), and
// each lookup hashes the name and probes the map (~110 instructions; five
// of a small proxied request's lookups found nothing), where the parser
// had already named every field it stored. The zero Fields knows nothing
// (another front end's request): Lacks then always reports false.
type Fields struct {
	stored fieldFilter
	known  bool
}

// Field is a name's bit in Fields' filter (FieldOf): a handler computes
// it once per name it asks about, so that asking is one AND.
type Field uint32

// FieldOf is name's Field: nonzero for a name of commonRequestHeaders
// (spelled canonically, as header keys are), zero for any other name,
// which Fields never reports lacked.
func FieldOf(name string) Field {
	_, slot, common := internKey(name)
	if !common {
		return 0
	}
	return 1 << (slot & 31)
}

// Lacks reports that the header map, as the parser filled it, holds no
// field named n's name, so a lookup of it would find nothing. False when
// it cannot tell: the name is not a common one (n is zero), a name stored
// shares its filter bit, or f is the zero Fields. Like Arrival.HopFree it
// speaks only for the parsed fields: not for a name the handler has set
// since, nor for a header it swapped in. Host and Transfer-Encoding,
// which never go into the map, are lacked.
func (f Fields) Lacks(n Field) bool {
	return f.known && n != 0 && f.stored&fieldFilter(n) == 0
}

// Fields reports which common names the request's head stored in its
// header (Fields.Lacks); the zero Fields for a request this writer did
// not parse.
func (w *response) Fields() Fields {
	if w.rs == nil {
		return Fields{}
	}
	return Fields{stored: w.rs.fields, known: true}
}

// headScan reads one request head off a bufio.Reader (up to and including
// its empty line), every line ending in CRLF and the empty lines before
// the request line dropped. Its state outlives a read error, so the gate,
// whose reads the reader's deadline may cut, resumes a head where it
// stopped; the lean server resets it for each head.
type headScan struct {
	head      []byte // the head read so far
	lineStart int    // where the line being read starts in head
	leading   int    // empty lines seen before the request line
}

func (s *headScan) reset() { s.head, s.lineStart, s.leading = s.head[:0], 0, 0 }

// scan reads until the head's empty line: nil means head holds the whole
// head. A head refused is a *requestError (isRefusal); any other error is
// br's, with what was read of the head kept.
func (s *headScan) scan(br *bufio.Reader, maxBytes int) error {
	for {
		frag, err := br.ReadSlice('\n')
		if len(s.head)+len(frag) > maxBytes {
			return &requestError{status: http.StatusRequestHeaderFieldsTooLarge, msg: "request head too large"}
		}
		s.head = append(s.head, frag...)
		if errors.Is(err, bufio.ErrBufferFull) {
			if len(s.head)-s.lineStart > MaxLine {
				return lineTooLong(s.lineStart == 0)
			}
			continue
		}
		if err != nil {
			return err
		}
		line := s.head[s.lineStart:]
		if len(line)-2 > MaxLine {
			return lineTooLong(s.lineStart == 0)
		}
		if len(line) < 2 || line[len(line)-2] != '\r' {
			return badRequest("line not terminated by CRLF (bare LF)")
		}
		if len(line) > 2 {
			s.lineStart = len(s.head)
			continue
		}
		if s.lineStart > 0 {
			return nil
		}
		if s.leading++; s.leading > maxLeadingCRLF {
			return badRequest("empty lines before the request line")
		}
		s.head = s.head[:0]
	}
}

// isRefusal reports whether err, from headScan.scan, refuses the head (a
// type assertion: errors.As's target would escape, an allocation per head).
func isRefusal(err error) bool {
	_, ok := err.(*requestError)
	return ok
}

// bufferedHead returns the request head at the start of the read buffer
// (a slice of it, valid until the next read) when all of it is there and
// it is one headScan.scan takes without a second look: no empty lines before the request line, every
// line ending in CRLF, none longer than MaxLine, the whole within the
// server's MaxHeaderBytes. nil: not so, and readHead's scan decides (what it
// reads, refuses or waits for is unchanged). Why: a small request's head
// arrives whole, and one pass over the buffer here replaces the scan's
// read and append per line and the two searches for the head's end that
// the serving step made before it (headWhole, headBuffered). The head is
// handed on as bytes, so readBufferedHead takes it without a second Peek.
//
// It notes the first lines' ends (c.ends) as it goes, for parseRequest;
// a head past 64 KiB (a MaxHeaderBytes above the default's) is left to
// the scan, so that every end fits.
func (c *conn) bufferedHead() []byte {
	b, _ := c.br.Peek(c.br.Buffered())
	maxBytes := min(c.srv.maxHeaderBytes(), math.MaxUint16)
	noted := 0
	for n := 0; ; {
		i := bytes.IndexByte(b[n:], '\n')
		if i < 0 {
			return nil // not all here
		}
		end := n + i + 1 // past this line's LF
		if uint(i-1) > MaxLine || b[end-2] != '\r' {
			return nil // bare LF, too long: the scan refuses it
		}
		if noted < maxLineEnds {
			c.ends.at[noted] = uint16(end)
			noted++
		}
		if i == 1 {
			if n == 0 || end > maxBytes {
				return nil // an empty line before the request line, a head too long
			}
			c.ends.n = uint8(noted)
			return b[:end]
		}
		n = end
	}
}

// lineEnds are the offsets past the LF of the first lines of the head
// bufferedHead last measured: parseRequest takes them instead of
// searching those lines again (a search is ~45 instructions, a head
// line's dearest step); lines past maxLineEnds are searched.
type lineEnds struct {
	at [maxLineEnds]uint16
	n  uint8
}

// maxLineEnds: wrk's head has five lines, an SDK's a dozen or so; 16
// keeps a conn in its size class (640 bytes, TestConnSizeClass).
const maxLineEnds = 16

// list is the ends noted.
func (e *lineEnds) list() []uint16 { return e.at[:e.n] }

// readBufferedHead takes the head bufferedHead returned off the read
// buffer, as readHead would have read it. first: the connection's first
// request (headString).
func (c *conn) readBufferedHead(b []byte, first bool) string {
	head := c.headString(b, first)
	_, _ = c.br.Discard(len(b))
	return head
}

// readHead reads one request head into c.hs and returns it as one string.
// first: the connection's first request (headString).
func (c *conn) readHead(first bool) (string, error) {
	c.hs.reset()
	err := c.hs.scan(c.br, c.srv.maxHeaderBytes())
	switch {
	case err == nil:
		return c.headString(c.hs.head, first), nil
	case isRefusal(err):
		return "", err
	case len(c.hs.head) == 0 && (errors.Is(err, io.EOF) || c.hs.leading > 0):
		return "", errNoRequest
	case errors.Is(err, io.EOF):
		return "", badRequest("request head cut short")
	}
	return "", err
}

// headString returns a copy of the request head b as a string. From a
// connection's second request on, a head of up to maxChunkedHead bytes is
// copied into the connection's headChunk instead of an allocation of its
// own: one allocation for a dozen or more heads of wrk's or an SDK's
// size where each took one (~300 instructions). The first request's head is always its own
// allocation, so a connection that carries one request (an SSE stream, a
// one-shot client) holds no chunk and its memory does not grow.
func (c *conn) headString(b []byte, first bool) string {
	if first || len(b) == 0 || len(b) > maxChunkedHead {
		return string(b)
	}
	hc := c.heads
	if hc == nil || len(hc.room)-int(hc.used) < len(b) {
		hc = new(headChunk) // the full one is dropped, never reset
		c.heads = hc
	}
	dst := hc.room[hc.used:][:len(b)]
	copy(dst, b)
	hc.used += uint16(len(b))
	return unsafe.String(&dst[0], len(dst))
}

// headChunk is room a connection's request heads are copied into one
// after another (headString). Its bytes are written once: used only
// grows and a full chunk is replaced by a new one, never emptied, so a
// head handed out as a string stays what it was for as long as anything
// holds it (a header value kept by a log line, a rule's label), and the
// collector frees the chunk once neither its connection nor any such
// string points into it. Pointer-free, so the collector never scans it.
//
// The memory a kept string pins is bounded by the chunk: 2 KiB where the
// head alone was at most maxChunkedHead bytes (longer heads are copied
// alone). A connection points at one chunk at a time, so a keep-alive
// connection, idle or streaming a later request's answer, holds at most
// 2 KiB more than before.
type headChunk struct {
	used uint16
	room [headChunkSize - 2]byte
}

// headChunkSize is a headChunk's size: a size class of its own (2048),
// so no room is lost to rounding.
const headChunkSize = 2048

// maxChunkedHead is the longest head headString copies into a chunk: a
// quarter of one, so at most that much of a chunk's end is left unused.
const maxChunkedHead = headChunkSize / 4

func lineTooLong(requestLine bool) error {
	if requestLine {
		return &requestError{status: http.StatusRequestURITooLong, msg: "request line too long"}
	}
	return &requestError{status: http.StatusRequestHeaderFieldsTooLarge, msg: "header line too long"}
}

// parsed is one request head's framing facts, besides the http.Request.
type parsed struct {
	chunked        bool
	expectContinue bool
	close          bool // the client asked to close after this request
	// hopField: the head held a field named by hop.Headers (Connection
	// among them, whose tokens name further fields), so the proxy must
	// strip the header; false lets it skip hop.Strip's walk of the map.
	hopField bool
	// stored filters the common names stored in the header map (Fields).
	stored fieldFilter
	// listed is how many fields the head stored when listable (HeadList):
	// the first maxListed fields, each a common name of its own, in
	// codes, byte i the i-th field's internTable slot plus one; else -1.
	listed int8
	codes  uint64
}

// maxListed is how many fields a head may store and still be a list
// (HeadList): as many as codes holds.
const maxListed = 8

// parseRequest fills r from head (as readHead returned it). ends, when
// not empty, are the offsets past the LF of head's first len(ends) lines
// as bufferedHead found them: those lines are not searched again. vals
// backs the header values; r.URL must point to a zeroed url.URL. h, when
// not nil, is an empty map that becomes r.Header (a connection's spare:
// see conn.takeRequestHeader); nil makes one.
func parseRequest(head string, ends []uint16, r *http.Request, vals []string, h http.Header) (parsed, error) {
	p := parsed{listed: -1}
	// Every line ends in CRLF (headScan, bufferedHead): the first LF ends
	// the request line.
	var eol int
	if len(ends) > 0 {
		eol = int(ends[0]) - 1
	} else {
		eol = strings.IndexByte(head, '\n')
	}
	if eol < 1 || head[eol-1] != '\r' || len(head) < eol+3 {
		return p, badRequest("line not terminated by CRLF (bare LF)")
	}
	reqLine := head[:eol-1]

	// The method's bytes are checked on the way to its space, and the
	// target's on the way to the next (targetEnd); only a line that
	// fails them is searched again, to refuse it as before.
	sp1 := 0
	for sp1 < len(reqLine) && methodChar[reqLine[sp1]] {
		sp1++
	}
	methodOK := sp1 < len(reqLine) && reqLine[sp1] == ' '
	if !methodOK {
		sp1 = strings.IndexByte(reqLine, ' ')
	}
	sp2, simple := -1, false
	if sp1 >= 0 {
		sp2, simple = targetEnd(head, sp1+1, len(reqLine))
	}
	if sp1 <= 0 || sp2 <= sp1+1 {
		return p, badRequest("malformed request line")
	}
	method, target, proto := reqLine[:sp1], reqLine[sp1+1:sp2], reqLine[sp2+1:]
	if !methodOK {
		return p, badRequest("request method is not upper-case letters")
	}
	if target == "*" {
		// asterisk-form asks about the server itself (OPTIONS *): nothing
		// for an engine, and nginx refuses it too.
		return p, badRequest("asterisk-form request target")
	}
	if !simple && !validTarget(target) {
		return p, badRequest("request target contains whitespace or a control byte")
	}
	switch proto {
	case "HTTP/1.1":
		r.ProtoMajor, r.ProtoMinor = 1, 1
	case "HTTP/1.0":
		r.ProtoMajor, r.ProtoMinor = 1, 0
	default:
		if _, _, ok := http.ParseHTTPVersion(proto); ok {
			return p, &requestError{status: http.StatusHTTPVersionNotSupported, msg: "unsupported HTTP version"}
		}
		return p, badRequest("malformed HTTP version")
	}
	r.Method, r.RequestURI, r.Proto = method, target, proto

	// Fields go into the map as they are read: a field refused later
	// refuses the whole head, and the map is not r.Header until the end.
	// Room for the two fields the gateway adds (X-Forwarded-For and
	// X-Request-Id): a map sized for the client's fields alone grows when
	// they go in, one allocation more at 7–8 fields and two at 13–14
	// (testing.AllocsPerRun, Go 1.26; none at 9–12). A request carries a
	// Host, which is no field of the map: the line count less one, plus two.
	fieldsEnd := len(head) - 2 // the field lines end here, each in CRLF
	if h == nil {
		h = make(http.Header, strings.Count(head[eol+1:fieldsEnd], "\n")+1)
	}
	var host, cl, te, conn, expect string
	var nHost, nCL, nTE, nFields, nVals int
	var seen internSet // the common names met
	listable := true   // so far each stored field a common name of its own, at most maxListed
	for off, next := eol+1, 1; off < fieldsEnd; {
		// Every line ends in CRLF (headScan): its LF, as bufferedHead
		// found it or searched for, ends it.
		end := -1 // past the line's LF
		if next < len(ends) {
			end, next = int(ends[next]), next+1
		} else if i := strings.IndexByte(head[off:fieldsEnd], '\n'); i >= 0 {
			end = off + i + 1
		}
		if end-off < 2 || head[end-2] != '\r' {
			return p, badRequest("line not terminated by CRLF (bare LF)")
		}
		line := head[off : end-2]
		// The name, up to the first colon: a common name is a token as it
		// is; any other is checked byte by byte.
		colon := strings.IndexByte(line, ':')
		off = end
		if colon <= 0 {
			return p, fieldLineError(line)
		}
		name := line[:colon]
		key, slot, common := internKey(name)
		if !common && !validFieldName(name) {
			return p, fieldLineError(line)
		}
		v := trimOWS(line[colon+1:])
		if !validFieldValue(v) {
			return p, badRequest("invalid byte in header value")
		}
		if !common {
			// Any other spelling of a common name canonicalises to it.
			key = textproto.CanonicalMIMEHeaderKey(name)
			_, slot, common = internKey(key)
		}
		// Before the cases below skip storing: a hop name in any spelling
		// marks the head, stored or not.
		if common && internTable[slot].hop || !common && hop.IsHeader(key) {
			p.hopField = true
		}
		switch key {
		case hdrHost:
			host, nHost = v, nHost+1
			continue // r.Host, not a header (as net/http)
		case hdrContentLength:
			cl, nCL = v, nCL+1
		case hdrTransferEncoding:
			te, nTE = v, nTE+1
			continue // the framing is the server's (as net/http)
		case hdrConnection:
			if conn == "" {
				conn = v
			} else {
				conn += "," + v
			}
		case hdrExpect:
			expect = v
		}
		if nFields == maxFields {
			return p, &requestError{status: http.StatusRequestHeaderFieldsTooLarge, msg: "too many header fields"}
		}
		nFields++
		// A repeated name adds a value. Common names are kept in a set of
		// their slots (no other name equals one), so the map is asked only
		// about the others.
		if common && seen.add(slot) || !common && h[key] != nil {
			h[key] = append(h[key], v)
			listable = false // a name twice: values to merge
			continue
		}
		if common && nFields <= maxListed {
			p.codes |= uint64(slot+1) << (8 * (nFields - 1))
		} else {
			listable = false
		}
		if nVals == len(vals) {
			vals, nVals = make([]string, strings.Count(head[off:fieldsEnd], "\n")+1), 0
		}
		vals[nVals] = v
		h[key] = vals[nVals : nVals+1 : nVals+1]
		nVals++
	}

	// Framing (RFC 9112 §6): no guessing between two lengths.
	switch {
	case nTE > 0 && nCL > 0:
		return p, badRequest("both Transfer-Encoding and Content-Length")
	case nTE > 1:
		return p, badRequest("duplicate Transfer-Encoding")
	case nTE == 1:
		if r.ProtoMinor == 0 {
			return p, badRequest("Transfer-Encoding in an HTTP/1.0 request")
		}
		if !strings.EqualFold(te, "chunked") {
			return p, &requestError{status: http.StatusNotImplemented, msg: "unsupported transfer coding"}
		}
		p.chunked = true
		r.ContentLength = -1
		r.TransferEncoding = chunkedTE
	case nCL > 1:
		return p, badRequest("duplicate Content-Length")
	case nCL == 1:
		n, ok := parseLength(cl)
		if !ok {
			return p, badRequest("invalid Content-Length")
		}
		r.ContentLength = n
	}

	switch {
	case nHost > 1:
		return p, badRequest("duplicate Host")
	case nHost == 0 && r.ProtoMinor == 1:
		return p, badRequest("missing Host")
	case nHost == 1 && host == "":
		return p, badRequest("empty Host") // nginx refuses it too
	case !validHost(host):
		return p, badRequest("invalid Host")
	}

	r.Header = h
	p.stored = seen.filter()
	if listable && nVals == nFields {
		p.listed = int8(nFields)
	}

	if simple && target[0] == '/' {
		r.URL.Path = target // the usual origin-form: nothing to cut or unescape
	} else if err := parseTarget(r, method, target); err != nil {
		return p, err
	}
	if r.Host == "" {
		r.Host = host
	}
	// "close" ends the connection whatever the version (RFC 9112 §9.6);
	// HTTP/1.0 persists only when it asks to.
	p.close = hasToken(conn, "close") || (r.ProtoMinor == 0 && !hasToken(conn, "keep-alive"))
	r.Close = p.close
	if expect != "" {
		if !strings.EqualFold(expect, "100-continue") {
			return p, &requestError{status: http.StatusExpectationFailed, msg: "unsupported Expect"}
		}
		p.expectContinue = r.ProtoMinor == 1 && r.ContentLength != 0
	}
	return p, nil
}

var chunkedTE = []string{"chunked"}

// fieldLineError is why a field line without a colon after a token is
// refused, checked in the order RFC 9112 §5 reads a field line.
func fieldLineError(line string) error {
	if line != "" && (line[0] == ' ' || line[0] == '\t') {
		return badRequest("obsolete line folding")
	}
	if strings.IndexByte(line, ':') <= 0 {
		return badRequest("malformed header line")
	}
	return badRequest("invalid header name")
}

// parseTarget fills r.URL (and r.Host for absolute-form) from a target
// that is not simply a path (targetEnd). Origin-form without escapes is
// cut in place; anything else goes through url.ParseRequestURI as
// net/http does.
func parseTarget(r *http.Request, method, target string) error {
	u := r.URL
	if target[0] == '/' && strings.IndexByte(target, '%') < 0 {
		path, query, _ := strings.Cut(target, "?")
		u.Path, u.RawQuery = path, query
		u.ForceQuery = strings.HasSuffix(target, "?") && query == ""
		return nil
	}
	if method == http.MethodConnect && target[0] != '/' {
		u.Host = target // authority-form
		return nil
	}
	pu, err := url.ParseRequestURI(target)
	if err != nil {
		return badRequest("malformed request target")
	}
	*u = *pu
	r.Host = u.Host
	return nil
}

// parseLength parses a Content-Length: 1*DIGIT, at most 18 digits.
func parseLength(s string) (int64, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		b := s[i]
		if b < '0' || b > '9' {
			return 0, false
		}
		n = n*10 + int64(b-'0')
	}
	return n, true
}

// hasToken reports whether the comma-separated list v holds tok (any case).
func hasToken(v, tok string) bool {
	for v != "" {
		var t string
		t, v, _ = strings.Cut(v, ",")
		if strings.EqualFold(trimOWS(t), tok) {
			return true
		}
	}
	return false
}

// trimOWS strips the optional whitespace around a field value.
func trimOWS(v string) string {
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	return v
}

// methodChar marks the bytes a request method may hold here: upper-case
// letters, '_' and '-'. RFC 9110 allows any token, but every method an
// inference API uses is upper case, and nginx refuses the rest too, so a
// lower-case "post" is not a request one front end runs and another drops.
// Read-only after package initialisation.
var methodChar = func() (t [256]bool) {
	for b := 'A'; b <= 'Z'; b++ {
		t[b] = true
	}
	t['_'], t['-'] = true, true
	return t
}()

// The checks below test eight bytes at a time (internal/swar), then look
// byte by byte only at what is left past the last whole word, or from a
// word the test flags. Why: the byte loops over the request target and
// field values were about a quarter of parsing wrk's head.

// validFieldValue reports whether v holds no byte of badValueByte.
func validFieldValue(v string) bool {
	if len(v) >= 8 {
		flagged := func(x uint64) bool { return swar.ByteBelow(x, ' ') || swar.ByteIs(x, 0x7f) }
		i := 0
		for ; i+8 < len(v); i += 8 {
			if flagged(swar.Word8(v[i : i+8])) {
				break
			}
		}
		if i+8 >= len(v) && !flagged(swar.Word8(v[len(v)-8:])) {
			return true
		}
		// A control byte, or a HTAB: byte by byte.
	}
	for i := 0; i < len(v); i++ {
		if badValueByte[v[i]] {
			return false
		}
	}
	return true
}

// targetEnd finds the space that ends a request target starting at from
// in head's request line (which ends at lineEnd, at its CR): sp is its
// offset, -1 for none. simple reports that the target holds no '%', no
// '?', no whitespace, no control byte and no DEL: valid (validTarget)
// and, in origin-form, r.URL's path as it is. Why one walk: the search
// for the space, the target's check and parseTarget's two searches each
// walked the target (~240 instructions of wrk's head, ~115 now).
func targetEnd(head string, from, lineEnd int) (sp int, simple bool) {
	i := from
	for ; i+8 <= len(head); i += 8 {
		// The line's CR stops the walk at its end, if nothing before.
		x := swar.Word8(head[i : i+8])
		if m := swar.Below(x, ' '+1) | swar.Is(x, 0x7f) | swar.Is(x, '%') | swar.Is(x, '?'); m != 0 {
			i += bits.TrailingZeros64(m) / 8
			break
		}
	}
	// A head's last bytes short of a word are looked at one by one.
	for i < lineEnd && !targetStop[head[i]] {
		i++
	}
	if i < lineEnd && head[i] == ' ' {
		return i, true
	}
	if j := strings.IndexByte(head[i:lineEnd], ' '); j >= 0 {
		return i + j, false
	}
	return -1, false
}

// targetStop marks the bytes that end targetEnd's walk: those a simple
// target does not hold. Read-only after package initialisation.
var targetStop = func() (t [256]bool) {
	for b := 0; b <= ' '; b++ {
		t[b] = true
	}
	t[0x7f], t['%'], t['?'] = true, true, true
	return t
}()

// validHost reports whether a Host value holds only bytes
// httpguts.ValidHostHeader allows. A name or address of eight bytes or
// more in lower case, digits, '.', '-' and ':' (nearly every one a client
// sends) is seen a word at a time; any other goes to httpguts' byte loop
// (125 instructions for wrk's 15-byte Host, 79 now).
func validHost(h string) bool {
	if len(h) >= 8 {
		i := 0
		for ; i+8 < len(h); i += 8 {
			if !commonHostWord(swar.Word8(h[i : i+8])) {
				break
			}
		}
		if i+8 >= len(h) && commonHostWord(swar.Word8(h[len(h)-8:])) {
			return true
		}
	}
	return httpguts.ValidHostHeader(h)
}

// commonHostWord reports whether every byte of x is a lower-case letter,
// a digit, '.', '-' or ':'. A byte's test of at least lo holds only for
// bytes under 0x80, hence the first.
func commonHostWord(x uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	a := x | highs
	dashDot := (a - ones*'-') &^ (a - ones*'/')    // - .
	digitColon := (a - ones*'0') &^ (a - ones*';') // 0-9 :
	lower := (a - ones*'a') &^ (a - ones*'{')
	return x&highs == 0 && (dashDot|digitColon|lower)&highs == highs
}

// validTarget reports whether a request target holds no whitespace, no
// control byte and no DEL (swar.Plain: the handler's check on the other
// front ends is the same function).
func validTarget(t string) bool { return swar.Plain(t) }

// badValueByte marks the bytes a field value may not hold: controls other
// than HTAB, and DEL (RFC 9110 §5.5). Read-only after package
// initialisation.
var badValueByte = func() (t [256]bool) {
	for b := 0; b < ' '; b++ {
		t[b] = b != '\t'
	}
	t[0x7f] = true
	return t
}()

// tokenChar marks the bytes of an RFC 9110 token. Read-only after package
// initialisation.
var tokenChar = func() (t [256]bool) {
	for b := 0x21; b < 0x7f; b++ {
		t[b] = strings.IndexByte("\"(),/:;<=>?@[\\]{}", byte(b)) < 0
	}
	return t
}()
