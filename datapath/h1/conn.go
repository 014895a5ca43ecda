package h1

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/infergate/infergate/datapath/sockio"
)

// Connection states (conn.state): Shutdown closes only idle connections,
// and a connection that woke with a request may no longer be closed as
// idle.
const (
	stateIdle int32 = iota
	stateActive
	stateClosing
)

// watchAfter is how long a request runs before its connection is watched
// for the client going away (watch_linux.go): shorter requests never pay
// the registration.
const watchAfter = 20 * time.Millisecond

// lingerAfterRefusal bounds how long a connection closed with unread
// request bytes keeps reading (and dropping) them after a half-close, so
// the client reads the answer instead of a reset.
const lingerAfterRefusal = 500 * time.Millisecond

// lingerMaxBytes bounds what a lingering close drops. It is well above the
// bodies a refusal cuts short (a 413 at the streamed-body limit leaves the
// rest of an upload in flight): stopping at a smaller count left a client
// still sending its last bytes with a reset instead of the answer.
const lingerMaxBytes = 16 << 20

// conn is one client connection, served on one goroutine.
type conn struct {
	srv   *Server
	nc    net.Conn
	id    uint64        // in srv.conns
	wid   uint64        // in the watcher's set
	ctx   *connCtx      // every request's context: ended when the client goes
	proto *http.Request // a zero request with ctx: each request starts as a copy

	br *bufio.Reader
	bw *bufio.Writer
	// sock follows bw: a streamed response's flush touches both, and the
	// fields of sock's that a write uses come first in it (one cache line
	// per relayed event where there were two). bw sits at byte 64, so the
	// pair stays in one line with the malloc header the runtime puts
	// before a conn (8 bytes) and without it (TestConnLayout).
	sock   sockio.Conn // nc's reads, writes and lazy read deadline
	hs     headScan    // the request head being read
	ends   lineEnds    // the line ends of the head bufferedHead measured
	remote string
	// ip is Server.RemoteIP(remote), when hasIP (ResponseWriter.RemoteIP).
	ip         netip.Addr
	hasIP      bool
	closeAfter bool // this response is the connection's last
	reqClose   bool // the client asked for that (the three flags share hasIP's padding)

	state     atomic.Int32
	busySince atomic.Int64 // UnixNano when the running request started; 0 between requests

	heads *headChunk // the room later request heads are copied into (headString)
	cur   *response  // the response in progress (for 100 Continue)
	// spareHeader is the last response's header map, emptied and handed to
	// the next response (none kept: nil): a map and its slots are then
	// made once per connection instead of once per request.
	spareHeader spareMap
	// spareReqHeader is the last request's header map, kept the same way
	// for the next request's fields (takeRequestHeader).
	spareReqHeader spareMap

	// Serving inside the socket's read wait (step; nil without raw calls).
	stepFn      func() bool
	next        *reqState // parsed in the wait; its body needs reads of its own
	first       bool      // the next request is the connection's first (beside the other flags: no padding)
	closing     bool      // the step ended the connection
	lingerAfter bool      // a linger asked for in the wait, run after it

	// endedAt and endedMono are when the handler said its answer ended
	// (EndedAt); zero: it did not. The idle mark and deadline after the
	// request take them (idle).
	endedAt   time.Time
	endedMono sockio.Mono

	// codes are the last parsed head's parsed.codes (HeadList): its
	// request's, while its handler runs (a connection parses its next
	// head only after).
	codes uint64

	// spareW is the write buffer the running request's state carried in
	// (reqState.bw, parkWriter), taken by the first write (writer); nil
	// between requests.
	spareW *bufio.Writer
}

// reqState is what one request needs on the heap besides its
// http.Request, in one allocation.
type reqState struct {
	start time.Time // the head's first read
	req   http.Request
	hdr   http.Header // the header map parseRequest filled (req.Header, unless the handler swapped it)
	url   url.URL
	body  body
	w     response
	vals  [16]string // backing array for single-valued header fields
	// scratch is the handler's, carried from request to request with the
	// state (Scratch): what it holds lives exactly as long as the state,
	// so until the response is finished, not only until the handler
	// returns.
	scratch any
	// hopFree: parseRequest stored no hop-by-hop field in hdr
	// (Arrival.HopFree).
	hopFree bool
	// whole: the body (if any) was all in the read buffer when the head
	// was parsed (ResponseWriter.Arrived).
	whole bool
	// listed is parsed.listed (HeadList), in the flags' padding.
	listed int8
	// fields filters the common names parseRequest stored in hdr
	// (response.Fields); beside the two flags, in the state's padding.
	fields fieldFilter
	// bw is a flushed write buffer carried from the last response the
	// state served to the next one (parkWriter). In the room the state's
	// size class had left (896 bytes and the malloc header in a
	// 1,024-byte slot).
	bw *bufio.Writer
}

func (c *conn) serve() {
	growStack()
	s := c.srv
	if s.RemoteIP != nil {
		c.ip, c.hasIP = s.RemoteIP(c.remote), true
	}
	c.br = s.getReader(&c.sock)
	defer c.close()
	s.setState(c.nc, http.StateNew)
	if c.sock.CanHold() {
		c.sock.WatchHangUp(&s.hup) // a FIN that came with the last request
		c.stepFn = c.step
	}
	var idleAt sockio.Mono // when the last request ended; NoDeadline: none yet
	for first := true; ; first = false {
		c.armIdle(first, idleAt)
		if c.br == nil {
			c.br = s.getReader(&c.sock) // lent out while the last response streamed
		}
		if c.stepFn != nil {
			// Requests that arrive whole are served inside the socket's
			// read wait (step); the hold ends at one that needs reads of
			// its own, served below as on any other connection.
			c.first, c.next, c.closing = first, nil, false
			err := c.sock.Hold(c.stepFn)
			if c.lingerAfter {
				c.linger()
				return
			}
			if err != nil || c.closing {
				return
			}
			first = c.first
			if c.next != nil {
				if !c.finishRequest(c.next) || s.shuttingDown() {
					return
				}
				idleAt = c.idle()
				continue
			}
			if c.br == nil {
				c.br = s.getReader(&c.sock)
			}
		}
		if _, err := c.br.Peek(1); err != nil {
			return
		}
		if !c.state.CompareAndSwap(stateIdle, stateActive) {
			return // closed as idle by Shutdown
		}
		s.setState(c.nc, http.StateActive)
		if !c.serveOne(first) {
			return
		}
		if s.shuttingDown() {
			return
		}
		idleAt = c.idle()
	}
}

// stackFrame is growStack's frame: with what a stream's deepest calls
// use beside it, the 8 KiB stack a relaying connection reaches anyway.
const stackFrame = 6 << 10

// growStack grows the connection goroutine's stack to 8 KiB while it is
// still shallow. Why: a stream's goroutine otherwise starts at 2 KiB and
// grows to 4 and then 8 KiB in its relay's deep calls, each time copying
// (and adjusting) the frames in use: two copystacks of ~35k instructions
// a stream, ~700 an event at 100 events a stream. One growth here copies
// a frame or two. The runtime's collections may shrink an idle
// connection's stack again.
//
//go:noinline
func growStack() {
	var frame [stackFrame]byte
	touchFrame(&frame)
}

// touchFrame keeps growStack's frame from being optimised away.
//
//go:noinline
func touchFrame(p *[stackFrame]byte) { p[0] = 1 }

// idle marks the connection idle after a request and returns the moment
// it did, which its idle deadline starts from (armIdle): the handler's
// reading of its answer's end when it gave one (EndedAt), else a new one.
func (c *conn) idle() sockio.Mono {
	now, at := c.endedAt, c.endedMono
	c.endedAt, c.endedMono = time.Time{}, sockio.NoDeadline
	if now.IsZero() || at == sockio.NoDeadline {
		now = time.Now()
		at = sockio.MonoOf(now)
	}
	c.state.Store(stateIdle)
	c.srv.setIdle(c.nc, now)
	return at
}

// EndedAt tells the connection when the handler's answer ended: a clock
// reading the handler made anyway as it finished (the datapath's request
// latency ends there), as a time.Time for the idle mark (Server.ConnIdle)
// and as a sockio.Mono for the idle deadline; at must be t's Mono. The
// idle mark and idle deadline that follow the request start from it
// instead of a reading of their own, which would come a few microseconds
// later (later still when the answer's last bytes wait on a slow client:
// the idle bound then counts that wait too). Why both: the handler has
// the Mono from an integer add (its start's Mono and the latency), where
// converting t here was ~50 instructions a request (sockio.MonoOf).
// (Defined here, with the idle mark it feeds.)
func (w *response) EndedAt(t time.Time, at sockio.Mono) { w.c.endedAt, w.c.endedMono = t, at }

// armIdle sets the read deadline of the wait for the next request: the
// header bound for a connection's first, the idle bound after, from now
// (NoDeadline: a clock reading of its own).
func (c *conn) armIdle(first bool, now sockio.Mono) {
	s := c.srv
	wait := s.IdleTimeout
	if wait <= 0 {
		wait = s.ReadTimeout
	}
	if first {
		wait = s.ReadHeaderTimeout
	}
	// The deadline as an integer (sockio.Mono): a Time.Add here was ~74
	// instructions of every request.
	if wait > 0 {
		if now == sockio.NoDeadline {
			now = sockio.Now()
		}
		_ = c.sock.SetReadDeadlineAt(now.Add(wait))
	} else {
		_ = c.sock.SetReadDeadlineAt(sockio.NoDeadline)
	}
}

// step is one turn of the connection inside the socket's read wait
// (sockio.Conn.Hold): it serves every request that is whole in the read
// buffer, reads while the socket may hold more, and waits (true) only
// once a read found it empty. It ends the hold (false) on a request that
// needs reads of its own (a head not yet whole or past the buffer, a body
// not all in it; c.next, or nothing when the head is not parsed yet), or
// when the connection must close (c.closing).
func (c *conn) step() bool {
	s := c.srv
	for {
		// A connection whose reader went back to the pool with its
		// request's body (releaseReader) takes one only to read: it waits
		// for its next request without one.
		if c.br != nil && c.br.Buffered() > 0 {
			whole := c.bufferedHead()
			if whole == nil && !c.headWhole() {
				return false // the ordinary path reads it line by line
			}
			if !c.state.CompareAndSwap(stateIdle, stateActive) {
				c.closing = true // closed as idle by Shutdown
				return false
			}
			s.setState(c.nc, http.StateActive)
			rs, ok := c.readRequest(c.first, whole)
			c.first = false
			if !ok {
				c.closing = true
				return false
			}
			if rs.req.ContentLength != 0 && !rs.body.buffered() {
				c.next = rs // its body needs reads that may wait
				return false
			}
			if !c.finishRequest(rs) || s.shuttingDown() {
				c.closing = true
				return false
			}
			c.armIdle(false, c.idle())
			continue
		}
		if c.sock.Drained() {
			// Nothing can be pending that the wait would not report. A
			// request without a body handed no buffer back: the wait
			// holds none all the same.
			c.releaseReader()
			return true
		}
		if c.br == nil {
			c.br = s.getReader(&c.sock)
		}
		if _, err := c.br.Peek(1); err != nil {
			if errors.Is(err, sockio.ErrWouldBlock) {
				c.releaseReader()
				return true
			}
			c.closing = true // the client went away (or the read failed)
			return false
		}
	}
}

// serveOne reads, handles and answers one request; false means the
// connection must close.
func (c *conn) serveOne(first bool) bool {
	rs, ok := c.readRequest(first, c.bufferedHead())
	return ok && c.finishRequest(rs)
}

// readRequest reads and parses a request head; false means the connection
// must close (a refused head has been answered). whole is the head
// bufferedHead found in the read buffer (nil: read it with readHead).
func (c *conn) readRequest(first bool, whole []byte) (*reqState, bool) {
	s := c.srv
	start := time.Now()
	var head string
	var ends []uint16 // its line ends, when bufferedHead measured it
	var err error
	if whole != nil {
		head, ends = c.readBufferedHead(whole, first), c.ends.list() // all there: no header deadline needed
	} else {
		if d := s.ReadHeaderTimeout; d > 0 && !first && !c.headBuffered() {
			_ = c.sock.SetReadDeadline(start.Add(d))
		}
		head, err = c.readHead(first)
	}
	if err != nil {
		var re *requestError
		if errors.As(err, &re) {
			c.refuse(re)
		}
		return nil, false
	}
	rs := s.getState()
	c.spareW, rs.bw = rs.bw, nil
	// Emptied in place, then filled (a composite literal assigned whole
	// is built on the stack and copied over, twice the stores), and only
	// what is read before it is written: the response is set whole by
	// finishRequest and vals are written before they are read (~40 % of
	// the state's bytes).
	rs.req, rs.start = *c.proto, start // carries c.ctx: no WithContext copy
	rs.url, rs.body, rs.hdr, rs.hopFree, rs.whole = url.URL{}, body{}, nil, false, true
	tmpl := &rs.req
	tmpl.URL, tmpl.RemoteAddr, tmpl.Body = &rs.url, c.remote, http.NoBody
	p, err := parseRequest(head, ends, tmpl, rs.vals[:], c.takeRequestHeader())
	rs.hdr = tmpl.Header
	if err != nil {
		var re *requestError
		if errors.As(err, &re) {
			c.refuse(re)
		}
		return nil, false
	}
	if tmpl.ContentLength != 0 {
		rs.body = body{c: c, chunked: p.chunked, n: max(tmpl.ContentLength, 0), continue100: p.expectContinue}
		tmpl.Body = &rs.body
		rs.whole = rs.body.buffered()
		if dl, ok := c.bodyDeadline(rs); ok {
			_ = c.sock.SetReadDeadline(dl)
		}
	}
	c.reqClose = p.close
	rs.hopFree, rs.fields, rs.listed = !p.hopField, p.stored, p.listed
	c.codes = p.codes // the state's size class has no room left for them
	return rs, true
}

// bodyDeadline is the read deadline a request's body is read under,
// ReadTimeout from the head's first read; ok is false when there is none
// to set: no ReadTimeout, or a body already whole in the read buffer
// (rs.whole, set from body.buffered as the head is parsed),
// which is read without the socket (no deadline can bound it, and setting
// one was two time computations per small request).
func (c *conn) bodyDeadline(rs *reqState) (dl time.Time, ok bool) {
	d := c.srv.ReadTimeout
	if d <= 0 || rs.whole {
		return time.Time{}, false
	}
	return rs.start.Add(d), true
}

// finishRequest handles and answers a parsed request; false means the
// connection must close.
func (c *conn) finishRequest(rs *reqState) bool {
	r := &rs.req
	c.closeAfter = false
	rs.w = response{c: c, status: http.StatusOK, cl: -1, rs: rs}
	w := &rs.w
	c.cur = w

	c.busySince.Store(rs.start.UnixNano())
	ok := c.handle(w, r)
	c.busySince.Store(0)
	c.cur = nil
	if !ok {
		// The handler aborted: a cut response must not look complete. Its
		// state is left to the collector, as whatever the panic
		// interrupted may still hold it.
		return false
	}
	w.finish()
	c.keepHeader(w.h)
	c.keepRequestHeader(rs.hdr)
	failed := w.err != nil
	if !failed {
		c.parkWriter(rs, w.flushed) // flushed: idle until the next request
	}
	hasBody := r.ContentLength != 0
	if hasBody && !rs.body.drainBuffered() {
		c.closeAfter = true
	}
	unread := hasBody && !rs.body.done
	// The body's drain was the state's last use (the linger below reads
	// the socket, not the state). Given back here rather than deferred: the
	// defer was ~30 instructions of every request (callgrind).
	c.srv.putState(rs)
	if failed {
		return false
	}
	if c.closeAfter || c.reqClose || c.ctx.isEnded() {
		if unread {
			c.linger()
		}
		return false
	}
	return true
}

// maxSpareFields bounds the header maps kept for the next response: a map
// that held more has grown past the runtime's small-map slots, and is let
// go rather than held by the connection while it idles. (Not for speed:
// emptying a kept map that had held 200 fields still took under half the
// time of a new map given three, Go 1.26 microbenchmark.)
const maxSpareFields = 8

// keepHeader keeps h, a finished response's header map, for the next
// response (newHeader). The handler has returned and the head is written:
// nothing reads h any more.
func (c *conn) keepHeader(h http.Header) { c.spareHeader.keep(h, maxSpareFields) }

// newHeader is an empty header map for a response: the connection's spare
// one, emptied, or a new one.
func (c *conn) newHeader() http.Header {
	if h := c.spareHeader.take(); h != nil {
		return h
	}
	return make(http.Header, 4)
}

// maxSpareRequestFields bounds the request header maps kept for the next
// request. It is above maxSpareFields because clients send more fields
// than engines answer with: the OpenAI SDKs send about sixteen (their
// X-Stainless-* set, Authorization, Accept, ...), and the gateway adds two.
// A map past it is let go, so an idle connection holds at most one map of
// this size (about 1.5 KB).
const maxSpareRequestFields = 24

// keepRequestHeader keeps h, the header map of a request whose handler has
// returned, for the next request's fields (takeRequestHeader). The
// handler contract (doc.go) is net/http's: nothing uses the request after
// the handler returns, so nothing reads h any more. Why: a map and its
// slots made per request were two of a small request's allocations.
func (c *conn) keepRequestHeader(h http.Header) { c.spareReqHeader.keep(h, maxSpareRequestFields) }

// takeRequestHeader is the connection's spare request header map, emptied,
// or nil (parseRequest then makes one).
func (c *conn) takeRequestHeader() http.Header { return c.spareReqHeader.take() }

// spareMap is a header map a connection keeps from one request (or
// response) for the next, so a map and its slots are made once per
// connection instead of once per request.
type spareMap struct{ h http.Header }

// keep keeps h unless it held more than maxFields: a map grown that far is
// let go rather than held by the connection while it idles.
func (s *spareMap) keep(h http.Header, maxFields int) {
	if h != nil && len(h) <= maxFields {
		s.h = h
	}
}

// take hands the kept map over, emptied (nil: none kept).
func (s *spareMap) take() http.Header {
	h := s.h
	if h != nil {
		s.h = nil
		clear(h)
	}
	return h
}

// handle runs the handler; false means it panicked (http.ErrAbortHandler
// or a bug), and the connection is cut.
func (c *conn) handle(w http.ResponseWriter, r *http.Request) (ok bool) {
	defer func() {
		if v := recover(); v != nil {
			ok = false
			if v != http.ErrAbortHandler { //nolint:errorlint // sentinel identity is the contract
				buf := make([]byte, 16<<10)
				buf = buf[:runtime.Stack(buf, false)]
				c.srv.logf("h1: panic serving %s: %v\n%s", c.remote, v, buf)
			}
		}
	}()
	c.srv.Handler.ServeHTTP(w, r)
	return true
}

// headBuffered reports whether a whole request head is already in the
// read buffer (no header deadline needed: nothing can block).
func (c *conn) headBuffered() bool {
	b, _ := c.br.Peek(c.br.Buffered())
	return bytes.Contains(b, []byte("\r\n\r\n"))
}

// headWhole reports whether reading the next request head from the read
// buffer makes no socket read: its end (an empty line) is there, past the
// empty lines that may precede a request line. (headBuffered, which only
// decides whether a header deadline is needed, may count those.)
func (c *conn) headWhole() bool {
	b, _ := c.br.Peek(c.br.Buffered())
	for bytes.HasPrefix(b, []byte("\r\n")) {
		b = b[2:]
	}
	return bytes.Contains(b, []byte("\r\n\r\n"))
}

// refuse answers a request head that cannot be served and lets the
// connection close: nothing after it is parsed.
func (c *conn) refuse(re *requestError) {
	text := strconv.Itoa(re.status) + " " + http.StatusText(re.status)
	msg := text + ": " + re.msg
	bw := c.writer()
	bw.WriteString("HTTP/1.1 " + text + "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: ")
	bw.WriteString(strconv.Itoa(len(msg)))
	bw.WriteString("\r\n\r\n")
	bw.WriteString(msg)
	if bw.Flush() == nil {
		c.linger()
	}
}

// linger half-closes the connection and drops what the client still
// sends for a short while, so closing with unread bytes does not reset the
// connection under the answer the client has not read yet.
func (c *conn) linger() {
	if c.sock.InStep() {
		c.lingerAfter = true // reads of c.nc would wait for the hold's read lock
		return
	}
	c.lingerAfter = false
	// The hang-up watcher's wake-up (a past read deadline) would end the
	// drain at the client's FIN with bytes still unread: the reset that
	// lingering is there to avoid. The connection closes after this.
	c.sock.StopWatchingHangUp()
	type closeWriter interface{ CloseWrite() error }
	nc := sockio.Unwrap(c.nc)
	cw, ok := nc.(closeWriter)
	if !ok {
		return
	}
	_ = cw.CloseWrite()
	_ = c.nc.SetReadDeadline(time.Now().Add(lingerAfterRefusal))
	_, _ = io.Copy(io.Discard, io.LimitReader(c.nc, lingerMaxBytes))
}

// writeContinue answers "Expect: 100-continue" when the handler starts
// reading the body and has not answered yet.
func (c *conn) writeContinue() {
	if w := c.cur; w != nil && w.headOut {
		return
	}
	bw := c.writer()
	bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
	_ = bw.Flush()
}

// releaseReader returns the read buffer to the server's pool once a
// request's body is read and nothing more is buffered: a long response
// (an SSE stream) then holds no read buffer; the next request takes one
// again.
func (c *conn) releaseReader() {
	if c.br == nil || c.br.Buffered() > 0 {
		return
	}
	c.br.Reset(nil)
	c.srv.readers.Put(c.br)
	c.br = nil
}

// writer is the connection's write buffer: the one its request's state
// carried in (spareW), else one borrowed from the server's pool, when the
// connection holds none.
func (c *conn) writer() *bufio.Writer {
	if c.bw == nil {
		c.takeWriter() // out of line: writer stays inlined at its callers
	}
	return c.bw
}

// takeWriter gives the connection a write buffer: the one its request's
// state carried in, else one from the server's pool.
func (c *conn) takeWriter() {
	if bw := c.spareW; bw != nil {
		c.spareW = nil
		bw.Reset(&c.sock)
		c.bw = bw
		return
	}
	c.bw = c.srv.getWriter(&c.sock)
}

// parkWriter puts the connection's write buffer, flushed after a
// finished response, into rs, that request's state: the state carries it
// through the state pool to the next request's first write (spareW,
// writer). Why: a small request then makes one pool round trip (the
// state's) where it made two (the state's and the writer's), ~130
// instructions fewer. An idle connection still holds no buffer: it rides
// in a pooled state. The price: a request that takes such a state and
// then waits (for its engine, in the flow queue) holds the buffer until
// its head is written, where it would have borrowed one only then.
//
// A response that flushed (a stream) gives its buffer to the writers pool
// instead, as Flush did between its events: streams that end together
// then share the few buffers their last writes used rather than each
// parking one, and the states that served them carry none into the
// engine wait of their next request. A buffer the request was carried in
// and did not use goes back the same way.
func (c *conn) parkWriter(rs *reqState, streamed bool) {
	if c.spareW != nil {
		c.srv.putWriter(c.spareW)
		c.spareW = nil
	}
	if streamed || c.bw == nil {
		c.releaseWriter()
		return
	}
	c.bw.Reset(nil) // the next request may be another connection's
	rs.bw, c.bw = c.bw, nil
}

// releaseWriter returns the write buffer to the pool; callers release it
// only when it is empty (flushed) or the connection is closing. An open
// stream between two events, or a connection waiting for its next request,
// then holds no write buffer.
func (c *conn) releaseWriter() {
	if c.bw == nil {
		return
	}
	c.srv.putWriter(c.bw)
	c.bw = nil
}

// pendingBuf lends a smallBody buffer for a held-back response body.
func (c *conn) pendingBuf() []byte {
	if bp, ok := c.srv.pending.Get().(*[]byte); ok {
		return (*bp)[:0]
	}
	return make([]byte, 0, smallBody)
}

func (c *conn) putPendingBuf(b []byte) {
	if cap(b) == smallBody {
		b = b[:0]
		c.srv.pending.Put(&b)
	}
}

func (c *conn) close() {
	s := c.srv
	c.state.Store(stateClosing)
	c.ctx.end()
	c.sock.StopWatchingHangUp()
	_ = c.nc.Close()
	s.removeConn(c)
	s.setState(c.nc, http.StateClosed)
	if c.br != nil {
		c.br.Reset(nil)
		s.readers.Put(c.br)
	}
	c.releaseWriter()
	if c.spareW != nil { // carried in by a request that did not finish
		s.putWriter(c.spareW)
		c.spareW = nil
	}
	c.br = nil
}

// cut closes c from another goroutine without waiting for it. A request
// served inside the socket's read wait (step) holds the descriptor's read
// lock, and net.Conn's Close waits for that: so cut ends the request's
// context, unblocks the connection's reads and writes, shuts the socket
// down (the client sees the close now) and leaves the Close to a
// goroutine of its own.
func (c *conn) cut() {
	c.ctx.end()
	c.sock.Abort()
	if raw := rawConn(c.nc); raw != nil {
		_ = raw.Control(func(fd uintptr) { _ = syscall.Shutdown(int(fd), syscall.SHUT_RDWR) })
	}
	go func() { _ = c.nc.Close() }()
}

// rawConn is the socket under nc (through wrappers that expose NetConn, as
// the admission layer's does), or nil.
func rawConn(nc net.Conn) syscall.RawConn {
	if sc, ok := sockio.Unwrap(nc).(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			return raw
		}
	}
	return nil
}
