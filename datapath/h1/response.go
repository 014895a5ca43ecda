package h1

import (
	"bufio"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/infergate/infergate/datapath/sockio"
	"github.com/infergate/infergate/internal/swar"
)

// smallBody is how much of a response of unknown length is held back
// before its head is written: a handler that finishes within it is
// answered with a Content-Length instead of chunked coding (as net/http's
// 2 KiB).
const smallBody = 2 << 10

// response is the http.ResponseWriter of one request.
type response struct {
	c       *conn
	h       http.Header
	status  int
	noBody  bool // HEAD, 1xx, 204, 304: no body bytes go out
	started bool // WriteHeader ran (status fixed)
	headOut bool // the head is in the connection's writer
	chunked bool
	flushed bool  // Flush ran: never hold back again
	cl      int64 // the declared Content-Length, -1 unknown
	written int64
	err     error // sticky write failure
	// pending holds the first bytes of a body of unknown length (smallBody).
	pending []byte
	// rs is the request's state: its request, start (Arrived) and Scratch.
	rs *reqState
}

// Arrival is what the server knew of a request when it handed it over
// (ResponseWriter.Arrived): one call for all of it, as a handler asks a
// writer once per request.
type Arrival struct {
	// Start is when the server began reading the head. The handler takes
	// it as its request's start instead of reading the clock again a
	// microsecond later: at ~70 ns a reading, the clock was ~3 % of the
	// gateway's CPU per small request (eleven readings).
	Start time.Time
	// BodyWhole: the body, if any, was all in the read buffer then, so
	// reading it waits on no client: a handler can take Start as "now"
	// for a bound that counts from when it passes the request on
	// (upstream.Leg.From), up to its own CPU time.
	BodyWhole bool
	// LineChecked: the parser refused a request line whose method is not
	// upper-case letters, '_' and '-' (a subset of RFC 9110's token), or
	// whose target holds a byte <= ' ' or DEL; so a handler's own check
	// of these (datapath's checkRequestLine, for front ends that hand
	// them over as sent, such as HTTP/2's :method and :path) would pass.
	// Always true from this server; a field so the handler names what it
	// relies on, and a differential test (datapath) holds it to it.
	LineChecked bool
	// HopFree: the request's header, as the parser filled it, holds no
	// field named by hop.Headers (so none that a Connection field names
	// either): a proxy may skip hop.Strip on it. It speaks only for the
	// parsed fields: a handler that adds fields to the header must strip
	// them itself. Why: hop.Strip walks the whole map per request, and
	// almost no request carries a hop field.
	HopFree bool
}

// Arrived reports the request's Arrival.
func (w *response) Arrived() Arrival {
	if w.rs == nil {
		return Arrival{}
	}
	return Arrival{Start: w.rs.start, BodyWhole: w.rs.whole, LineChecked: true, HopFree: w.rs.hopFree}
}

// HeadList returns the fields the head of the request w answers stored
// in its header map, in head order, when w is this server's writer and
// the head stored at most 8, each under a common name of its own (the
// names the parser interns, hence no value list to merge): names holds
// names by code less one, the i-th field's name is names[byte i of
// codes - 1] (codes ends at its first zero byte), its value values[i].
// ok is false for any other head. values are the request state's: valid
// until the handler returns; none of it speaks of fields the handler
// added to the map since or values it changed there. Why: a proxy
// writing the request on can walk the list instead of ranging over the
// map (a random start, then an iterator step per field), and the state
// had 8 B left in its size class for it, not a name per field.
func HeadList(w http.ResponseWriter) (names []string, codes uint64, values []string, ok bool) {
	rw, isH1 := w.(*response)
	if !isH1 || rw.rs == nil || rw.c == nil || rw.rs.listed < 0 {
		return nil, 0, nil, false
	}
	n := rw.rs.listed
	return internNames[:], rw.c.codes, rw.rs.vals[:n:n], true
}

var (
	_ http.ResponseWriter = (*response)(nil)
	_ http.Flusher        = (*response)(nil)
)

func (w *response) Header() http.Header {
	if w.h == nil {
		w.h = w.c.newHeader()
	}
	return w.h
}

func (w *response) WriteHeader(code int) { w.WriteHeaderFields(code, nil) }

// WriteHeaderFields is WriteHeader with more fields for the head, kv
// (name, value, name, value, …), written before the header map's: a
// proxy relays a head it parsed without putting its fields into the map
// for the head's walk to read them back, and clearing the map after
// (with the relay's side, ~1,200 instructions of a four-field answer,
// callgrind). They are subject to the map's rules (Transfer-Encoding is
// the server's, Content-Length declares the length and is dropped when
// invalid, Connection may close, Date and Content-Type count as set,
// values are scrubbed of CR, LF and NUL), but their names must be valid field names already, and kv may
// hold at most one Content-Length, and then the map none. Whatever does
// not go out now (an interim status; a head held back until the length
// is known) is added to the map, the only thing later writes read: kv is
// not kept.
func (w *response) WriteHeaderFields(code int, kv []string) {
	if w.started {
		return
	}
	if code < 100 || code > 999 {
		panic("h1: invalid WriteHeader code " + strconv.Itoa(code))
	}
	if code < 200 {
		w.fieldsIntoMap(kv)
		return // interim responses are not relayed
	}
	w.started = true
	w.status = code
	w.noBody = w.rs.req.Method == http.MethodHead || code == http.StatusNoContent || code == http.StatusNotModified
	w.cl = -1
	// The head is built now, in the one walk of the map that also reads
	// the declared length and a "Connection: close" (two map lookups here
	// were a tenth of writing a small answer's head). It is kept when the
	// length is known; otherwise it is dropped, and the first write or
	// finish writes it, as a held-back body may still give it its length.
	w.writeHeadEarly(kv)
}

// fieldsIntoMap adds the fields kv (WriteHeaderFields) to the header map,
// each name's values in their order, but for a Content-Length that is not
// a valid length: never sent, as the early walk deletes one from the map
// (a later walk does not look).
func (w *response) fieldsIntoMap(kv []string) {
	if len(kv) == 0 {
		return
	}
	h := w.Header()
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i] == hdrContentLength {
			if _, ok := parseLength(kv[i+1]); !ok {
				continue
			}
		}
		h[kv[i]] = append(h[kv[i]], kv[i+1])
	}
}

func (w *response) Write(p []byte) (int, error) {
	// A streamed chunked response (flushed, so started with its head out,
	// a body allowed and no length declared) whose writer holds nothing
	// sends each chunk straight to the socket: its checks below, and
	// writeBody's, would all pass, and skipping them and writeBody's call
	// is ~20 instructions of a relayed SSE event's ~4,000 (callgrind).
	if w.chunked && w.flushed && w.err == nil && w.c.bw == nil && len(p) > 0 && w.writeChunkNow(p) {
		w.written += int64(len(p))
		return len(p), w.err
	}
	if !w.started {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.noBody {
		return 0, http.ErrBodyNotAllowed
	}
	if w.cl >= 0 && w.written+int64(len(p)) > w.cl {
		return 0, http.ErrContentLength
	}
	if !w.headOut {
		if w.cl < 0 && !w.flushed && len(w.pending)+len(p) <= smallBody {
			if w.pending == nil {
				w.pending = w.c.pendingBuf()
			}
			w.pending = append(w.pending, p...)
			w.written += int64(len(p))
			return len(p), nil
		}
		w.writeHead(false)
	}
	w.written += int64(len(p))
	w.writeBody(p)
	return len(p), w.err
}

// BodyRoom lends the free room of w's write buffer behind what is
// buffered, when w is this server's writer, its head is in the buffer
// and its body goes out as it is (not chunked; no HEAD, 204 or 304),
// cut to what a declared length still allows; nil otherwise. A caller
// may read body bytes into the room and pass those n bytes to w.Write
// next, which then copies them onto themselves: nothing else may write
// to w, flush it or return from the handler between the two, and bytes
// not written that way are dropped. Why: a proxy reads a small answer's
// body from the engine straight into the client's buffer, without a
// relay buffer's pool round trip and one of its two copies: ~110
// instructions a request fewer, this call's ~48 counted (callgrind;
// docs/performance.md, session 19).
func BodyRoom(w http.ResponseWriter) []byte {
	rw, ok := w.(*response)
	if !ok || !rw.headOut || rw.chunked || rw.noBody || rw.err != nil || rw.c.bw == nil {
		return nil
	}
	room := rw.c.bw.AvailableBuffer()
	room = room[:cap(room)]
	if rw.cl >= 0 && int64(len(room)) > rw.cl-rw.written {
		room = room[:max(rw.cl-rw.written, 0)]
	}
	return room
}

// writeBody frames p into the connection's writer (a chunk that can go
// straight to the socket went there in Write).
func (w *response) writeBody(p []byte) {
	if len(p) == 0 {
		return
	}
	bw := w.c.writer()
	if w.chunked {
		if bw.Available() >= len(p)+chunkFrame {
			// The frame built in the writer's free room and taken whole:
			// one Write instead of four (size, CRLF, data, CRLF), which
			// per relayed SSE event was ~150 instructions of bufio calls
			// and a strconv call for two hex digits.
			b := appendChunkSize(bw.AvailableBuffer(), len(p))
			b = append(b, p...)
			_, err := bw.Write(append(b, '\r', '\n'))
			w.setErr(err)
			return
		}
		bw.Write(appendChunkSize(bw.AvailableBuffer(), len(p)))
		bw.Write(p)
		_, err := bw.WriteString("\r\n")
		w.setErr(err)
		return
	}
	_, err := bw.Write(p)
	w.setErr(err)
}

// writeChunkNow writes p as one chunk straight to the socket (one writev
// of its size line, p and CRLF) when the socket takes writes there
// (sockio.Conn.WriteFrame); false, with nothing written, when it does
// not. Only a streamed response (flushed before) whose writer holds
// nothing comes here: the chunk would be flushed next anyway, and nothing
// buffered goes before it. Why: per relayed SSE event the buffered writer
// was a pool round trip, a copy of the event and a flush, ~520
// instructions against ~200 this way (docs/performance.md, session 19).
func (w *response) writeChunkNow(p []byte) bool {
	// The size line's hex digits end at 16 and its CRLF follows; the
	// data's CRLF is the same two bytes, so the tail is a slice of them.
	var line [16 + 2]byte
	i := 16
	for n := len(p); ; n >>= 4 {
		i--
		line[i] = "0123456789abcdef"[n&15]
		if n < 16 {
			break
		}
	}
	line[16], line[17] = '\r', '\n'
	ok, err := w.c.sock.WriteFrame(line[i:], p, line[16:])
	if err != nil {
		w.setErr(err)
	}
	return ok
}

// chunkFrame is the most a chunk adds to its data: 16 hex digits of
// size and two CRLFs.
const chunkFrame = 16 + 2 + 2

// appendChunkSize appends n in lower-case hex and CRLF: a chunk's size
// line.
func appendChunkSize(b []byte, n int) []byte {
	var d [16]byte
	i := len(d)
	for {
		i--
		d[i] = "0123456789abcdef"[n&15]
		n >>= 4
		if n == 0 {
			break
		}
	}
	b = append(b, d[i:]...)
	return append(b, '\r', '\n')
}

func (w *response) setErr(err error) {
	if err != nil && w.err == nil {
		w.err = err
		w.c.closeAfter = true
	}
}

// writeHead writes the status line and fields. final means the handler has
// returned: a held-back body then gets its exact Content-Length.
func (w *response) writeHead(final bool) { w.buildHead(final, false, nil) }

// writeHeadEarly is WriteHeader's walk of the header: it reads the declared
// Content-Length (one valid value: w.cl; a single invalid one is deleted,
// never sent) and a Connection field naming "close", and builds the head
// in the writer's free space without committing a byte. The head is
// committed when the length is known and the whole head fit; otherwise it
// is dropped (a writer taken for it alone is given back) and written later
// by writeHead, with kv's fields (WriteHeaderFields) then in the map.
func (w *response) writeHeadEarly(kv []string) { w.buildHead(false, true, kv) }

// buildHead is writeHead (early false) and writeHeadEarly (early true,
// with the fields kv).
func (w *response) buildHead(final, early bool, kv []string) {
	c := w.c
	h := w.h
	if !early {
		w.headOut = true
	}
	if !early && w.cl < 0 && !w.noBody {
		switch {
		case final:
			w.cl = int64(len(w.pending)) // the whole body is held back: its exact length
		case w.rs.req.ProtoMinor == 0:
			c.closeAfter = true // HTTP/1.0: the end of the body is the end of the connection
		default:
			w.chunked = true
		}
	}
	if c.srv.shuttingDown() {
		c.closeAfter = true
	}
	// The head is appended straight into the writer's free space and
	// committed with one Write, and the fields the server adds or checks
	// are noted as the map is walked: four WriteString calls per field and
	// four map lookups after the walk were ~40 % of writing a five-field
	// head.
	took := c.bw == nil
	hb := headBuf{bw: c.writer(), tentative: early}
	hb.b = hb.bw.AvailableBuffer()
	hb.add(statusLine(w.rs.req.ProtoMinor, w.status))
	var hn headNotes
	w.writePairs(&hb, kv, &hn) // only early: kv's fields are in the map after
	if len(h) > 0 {            // a proxy relaying pairs leaves it empty: no iterator to start
		w.writeMap(&hb, h, early, &hn)
	}
	if !hn.hasDate {
		hb.field(hdrDate, c.srv.date())
	}
	if !hn.hasType && len(w.pending) > 0 && !w.noBody {
		hb.field(hdrContentType, http.DetectContentType(w.pending))
	}
	switch {
	case w.chunked:
		hb.add("Transfer-Encoding: chunked\r\n")
	case !w.noBody && w.cl >= 0 && hn.nLength == 0 && hb.reserve(len("Content-Length: \r\n")+20):
		hb.b = append(hb.b, "Content-Length: "...)
		hb.b = strconv.AppendInt(hb.b, w.cl, 10)
		hb.b = append(hb.b, "\r\n"...)
	}
	if c.closeAfter || c.reqClose {
		if hn.nConn == 0 {
			hb.add("Connection: close\r\n")
		}
	} else if w.rs.req.ProtoMinor == 0 {
		hb.add("Connection: keep-alive\r\n")
	}
	hb.add("\r\n")
	if early {
		// A "100 Continue" still owed goes out before the head, which
		// must stay out of the buffer until then (writeContinue).
		if w.cl < 0 || hb.over || w.rs.body.continue100 {
			if took && c.bw.Buffered() == 0 {
				c.releaseWriter() // taken for the dropped head alone
			}
			w.fieldsIntoMap(kv)
			return
		}
		w.headOut = true
	}
	w.setErr(hb.commit())
	if len(w.pending) > 0 {
		p := w.pending
		w.pending = nil
		w.writeBody(p)
		c.putPendingBuf(p)
	}
}

// headNotes is what buildHead notes of the fields it writes: those the
// server adds when absent (Date, Content-Type, Content-Length) and a
// Connection field, which means it adds no "Connection: close".
type headNotes struct {
	hasDate, hasType bool
	nLength, nConn   int
}

// writePairs appends the fields kv (WriteHeaderFields) to hb and notes
// the ones buildHead reads: a Content-Length sets w.cl (one that is not
// a valid length is never sent, nor put in the map: fieldsIntoMap), a
// Connection naming "close" closes the connection, a Transfer-Encoding is
// the server's to write. They are noted even when they do not fit a
// tentative head: their facts hold for the head written later. A field
// that fits and needs no scrub is appended in the loop (appendLine), any
// other through headBuf.field. Why its own loop: headBuf.field's call and
// its reserve's per field, and the map walk's switch after, were ~270
// instructions of each relayed field.
func (w *response) writePairs(hb *headBuf, kv []string, hn *headNotes) {
	b := hb.b
	for i := 0; i+1 < len(kv); i += 2 {
		k, v := kv[i], kv[i+1]
		switch k {
		case hdrTransferEncoding:
			continue
		case hdrContentLength:
			n, ok := parseLength(v)
			if !ok {
				continue
			}
			hn.nLength++
			w.cl = n
		case hdrDate:
			hn.hasDate = true
		case hdrContentType:
			hn.hasType = true
		case hdrConnection:
			if hn.nConn++; hasToken(v, "close") {
				w.c.closeAfter = true
			}
		}
		if len(b)+len(k)+len(v)+len(": \r\n") <= cap(b) && !needsScrub(v) {
			b = appendLine(b, k, v)
			continue
		}
		hb.b = b
		hb.field(k, v)
		b = hb.b
	}
	hb.b = b
}

// writeMap appends the header map h's fields to hb, noting the ones
// buildHead reads; early (WriteHeader's walk) also reads the declared
// length and a "Connection: close", and deletes a single Content-Length
// that is not a valid length (never sent).
func (w *response) writeMap(hb *headBuf, h http.Header, early bool, hn *headNotes) {
	for k, vv := range h {
		switch k {
		case hdrTransferEncoding:
			continue
		case hdrContentLength:
			if hn.nLength = len(vv); hn.nLength == 1 && early {
				n, ok := parseLength(vv[0])
				if !ok {
					delete(h, hdrContentLength) // never send a length we cannot honour
					hn.nLength = 0
					continue
				}
				w.cl = n
			}
			if w.chunked {
				continue
			}
		case hdrDate:
			hn.hasDate = true
		case hdrContentType:
			hn.hasType = true
		case hdrConnection:
			if hn.nConn += len(vv); early && closes(vv) {
				w.c.closeAfter = true
			}
		default:
			if !validFieldName(k) {
				continue
			}
		}
		for _, v := range vv {
			hb.field(k, v)
		}
	}
}

// Flush sends what is buffered, the head first. After the first flush
// (started, head out) with no writer taken, nothing is buffered: a stream
// whose chunks went straight to the socket (writeChunkNow) returns here,
// without FlushError's checks (~20 instructions a relayed SSE event,
// callgrind); FlushError would return at once too.
func (w *response) Flush() {
	if w.flushed && w.c.bw == nil {
		return
	}
	_ = w.FlushError()
}

// FlushError is Flush reporting a write failure (http.ResponseController).
func (w *response) FlushError() error {
	if !w.started {
		w.WriteHeader(http.StatusOK)
	}
	w.flushed = true
	if !w.headOut {
		w.writeHead(false)
	}
	if w.err != nil {
		return w.err
	}
	if w.c.bw == nil {
		return nil // nothing buffered: the chunks went out as written
	}
	w.setErr(w.c.bw.Flush())
	if w.err == nil {
		w.c.releaseWriter() // empty until the next event of a stream
	}
	return w.err
}

// SetReadDeadline bounds reads of the request body (http.ResponseController).
func (w *response) SetReadDeadline(t time.Time) error { return w.c.sock.SetReadDeadline(t) }

// Conn is the client connection the response is written to, when the
// request is served inside its read wait (the write goes straight to the
// socket there; see sockio.Conn.Hold); nil otherwise.
func (w *response) Conn() *sockio.Conn {
	if !w.c.sock.InStep() {
		return nil
	}
	return &w.c.sock
}

// SetWriteDeadline bounds writes of the response (http.ResponseController).
func (w *response) SetWriteDeadline(t time.Time) error { return w.c.sock.SetWriteDeadline(t) }

// SetWriteDeadlineAt is SetWriteDeadline with a sockio.Mono: a relay's
// stream bound keeps its deadlines as one (streambound), and the socket
// does too.
func (w *response) SetWriteDeadlineAt(m sockio.Mono) error { return w.c.sock.SetWriteDeadlineAt(m) }

// finish completes the response after the handler returned: the head if
// none went out, the last chunk, and the flush.
func (w *response) finish() {
	if !w.started {
		w.WriteHeader(http.StatusOK)
	}
	if !w.headOut {
		w.writeHead(true)
	}
	if w.chunked && w.err == nil {
		_, err := w.c.writer().WriteString("0\r\n\r\n")
		w.setErr(err)
	}
	if w.cl >= 0 && w.written != w.cl && !w.noBody {
		w.c.closeAfter = true // short body: the client must not wait for more
	}
	if w.err == nil {
		w.setErr(w.c.writer().Flush())
	}
}

// closes reports whether a Connection field's values name "close".
func closes(vv []string) bool {
	if len(vv) == 1 {
		return hasToken(vv[0], "close")
	}
	return len(vv) > 0 && hasToken(strings.Join(vv, ","), "close")
}

// statusLine returns "HTTP/1.x code text\r\n" (precomputed for the usual
// codes).
func statusLine(minor, code int) string {
	if minor == 1 && code >= 200 && code < 600 {
		if s := statusLines[code-200]; s != "" {
			return s
		}
	}
	proto := "HTTP/1.1 "
	if minor == 0 {
		proto = "HTTP/1.0 "
	}
	return proto + strconv.Itoa(code) + " " + http.StatusText(code) + "\r\n"
}

// statusLines holds the HTTP/1.1 status lines of the registered codes.
// Read-only after package initialisation.
var statusLines = func() (t [400]string) {
	for code := 200; code < 600; code++ {
		if text := http.StatusText(code); text != "" {
			t[code-200] = "HTTP/1.1 " + strconv.Itoa(code) + " " + text + "\r\n"
		}
	}
	return t
}()

// validFieldName reports whether k may be written as a field name.
func validFieldName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		if !tokenChar[k[i]] {
			return false
		}
	}
	return true
}

// headBuf appends a response head into a bufio.Writer's free space
// (AvailableBuffer), committing it with one Write: the bytes are copied
// once, where WriteString per piece checked and copied each piece apart.
type headBuf struct {
	bw *bufio.Writer
	b  []byte // bw's free space, filled so far
	// tentative: nothing may be committed before the end (the head may be
	// dropped); a piece that does not fit the free space sets over and is
	// left out.
	tentative, over bool
}

// reserve makes room for n more bytes in hb.b (true: cap holds them):
// what is filled is committed and, if n still does not fit, the writer
// flushed. A piece longer than the whole buffer gets room on the heap (a
// copy of the head, which Write sends on). false: a tentative head is
// over its free space, and the piece must be left out.
func (hb *headBuf) reserve(n int) bool {
	if len(hb.b)+n <= cap(hb.b) {
		return true
	}
	if hb.tentative {
		hb.over = true
		return false
	}
	_ = hb.commit()
	if n > hb.bw.Available() {
		_ = hb.bw.Flush() // a failure sticks in the writer: commit reports it
	}
	hb.b = slices.Grow(hb.bw.AvailableBuffer(), n)
	return true
}

// commit writes what is filled (bytes already in place) and reports the
// writer's error.
func (hb *headBuf) commit() error {
	_, err := hb.bw.Write(hb.b)
	hb.b = hb.b[len(hb.b):]
	return err
}

func (hb *headBuf) add(s string) {
	if hb.reserve(len(s)) {
		hb.b = append(hb.b, s...)
	}
}

// field appends "k: v\r\n" (appendField).
func (hb *headBuf) field(k, v string) {
	if hb.reserve(len(k) + len(v) + len(": \r\n")) {
		hb.b = appendField(hb.b, k, v)
	}
}

// appendField appends "k: v\r\n" to b, which must have room for it (no
// append here grows b), v with CR, LF and NUL replaced by spaces, as
// net/http does: a value can never start a new field or response.
func appendField(b []byte, k, v string) []byte {
	b = appendLine(b, k, v)
	if needsScrub(v) {
		scrub(b[len(b)-len(v)-2 : len(b)-2])
	}
	return b
}

// appendLine appends "k: v\r\n" to b as it is (small enough to inline
// in a caller's loop: writePairs, which checked v).
func appendLine(b []byte, k, v string) []byte {
	b = append(b, k...)
	b = append(b, ':', ' ')
	b = append(b, v...)
	return append(b, '\r', '\n')
}

// scrub replaces each CR, LF and NUL of b with a space.
func scrub(b []byte) {
	for i, c := range b {
		if c == '\r' || c == '\n' || c == 0 {
			b[i] = ' '
		}
	}
}

// needsScrub reports whether v holds a CR, LF or NUL: eight bytes at a
// time (validFieldValue's way; a short value as two words of four that
// overlap), any byte up to CR flagging a word for a closer look.
func needsScrub(v string) bool {
	switch {
	case len(v) >= 8:
		i := 0
		for ; i+8 < len(v); i += 8 {
			if swar.ByteBelow(swar.Word8(v[i:i+8]), '\r'+1) {
				break
			}
		}
		if i+8 >= len(v) && !swar.ByteBelow(swar.Word8(v[len(v)-8:]), '\r'+1) {
			return false
		}
	case len(v) >= 4:
		if !swar.ByteBelow(overlapWord(v), '\r'+1) {
			return false
		}
	}
	for i := 0; i < len(v); i++ {
		if b := v[i]; b == '\r' || b == '\n' || b == 0 {
			return true
		}
	}
	return false
}

// overlapWord is the first four bytes of v and its last four (4 <= len(v)
// < 8: they overlap) as one little-endian word: the compiler makes it two
// loads.
func overlapWord(v string) uint64 {
	t := v[len(v)-4:]
	return uint64(v[0]) | uint64(v[1])<<8 | uint64(v[2])<<16 | uint64(v[3])<<24 |
		uint64(t[0])<<32 | uint64(t[1])<<40 | uint64(t[2])<<48 | uint64(t[3])<<56
}
