package upstream

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/infergate/infergate/datapath/sockio"
	"github.com/infergate/infergate/metrics"
)

// Client is the datapath's HTTP/1.1 client to engines: a keep-alive pool
// per endpoint (and per TLS configuration) and a request/response exchange
// run on the caller's goroutine. It is the Sender the proxy and the P/D
// dialects share.
//
// Why not http.Transport: it runs a reader and a writer goroutine per
// connection and hands every request to them over channels, which on a small
// box costs more than the proxying itself. Here the caller's goroutine writes
// the request and reads the response directly. A pooled connection is
// checked before reuse (alive), so a connection the engine closed while
// idle (uvicorn drops them after 5 s) is discarded instead of failing a
// request that cannot be replayed.
type Client struct {
	dialer   net.Dialer
	maxIdle  int          // idle connections kept per endpoint
	maxConns int          // open connections per endpoint (pool.go); 0: no cap
	tlsm     *metrics.TLS // engine TLS handshakes; may be nil
	tlsSeq   atomic.Uint64

	// writers are the request buffers, borrowed only while a request is
	// written: a connection holds none while it waits for a response
	// (reqwriter.go), relays a stream or sits idle (16 KiB less per open
	// SSE stream).
	writers sync.Pool // *[]byte
	// readers hold the read buffers of streams waiting for their engine's
	// next bytes (waitread.go).
	readers sync.Pool // *bufio.Reader
	// hup wakes streams whose engine hung up with its last bytes
	// (stream.go); its goroutine runs only while streams do.
	hup sockio.HupWatcher
	// pooledHup records the hang-ups of pooled plaintext connections for
	// alive(), from their first return to the pool until they close; its
	// goroutine runs while any is open. A set of its own: a stream's
	// registration of the same socket in hup replaces the entry's id.
	pooledHup sockio.HupWatcher
	// loops relays the streams whose sink writes its client inside the
	// front end's read wait (ClientSink) from epoll loops: no wake-up of
	// the stream's goroutine per event.
	loops    sockio.Loops
	useLoops bool // Options.RelayLoops

	mu     sync.Mutex
	eps    map[string]*endpointConns // by endpoint address
	closed bool
	// reapStop ends ReapIdle's goroutine at CloseIdle (nil: none started).
	reapStop chan struct{}
	// idleTick counts ReapIdle's ticks; a connection pooled records it
	// instead of reading the clock (reap.go).
	idleTick uint64

	// responses is the batch newResponse hands answers out of.
	responses atomic.Pointer[responseBatch]
}

// New returns a Client whose dials give up after dialTimeout and which keeps
// at most maxIdle idle connections per endpoint, with the default Options.
// tlsm, when not nil, counts the TLS handshakes with engines.
func New(dialTimeout time.Duration, maxIdle int, tlsm *metrics.TLS) *Client {
	return NewWithOptions(dialTimeout, maxIdle, DefaultOptions(), tlsm)
}

// NewWithOptions is New with the connection bounds o.
func NewWithOptions(dialTimeout time.Duration, maxIdle int, o Options, tlsm *metrics.TLS) *Client {
	return &Client{
		dialer:   net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second},
		maxIdle:  maxIdle,
		maxConns: o.MaxConnsPerEndpoint,
		useLoops: o.RelayLoops,
		tlsm:     tlsm,
		eps:      make(map[string]*endpointConns),
	}
}

type conn struct {
	addr  string // endpoint address (its slot in Client.eps)
	tlsID string // TLS identity ("" plaintext): reused only by the same one
	br    *bufio.Reader
	spare *bufio.Reader // an empty holder, after a wait (waitread.go)
	tls   bool          // the socket is under a *tls.Conn (alive() must not peek under the records)
	// hostLine ends each request line written on the connection and
	// carries its Host field (hostLine): made once, not appended from
	// its three parts per request.
	hostLine string
	// ep is the connection's entry in Client.eps once put() has looked it
	// up (Client.mu): it is not forgotten while the connection is open.
	ep *endpointConns
	// idleTick is Client.idleTick when the connection was last pooled
	// (reap.go).
	idleTick uint64
	// usedAt is when its last exchange took it, before the request was
	// written: the engine's keep-alive timer started after that.
	usedAt sockio.Mono
	// watched: pooledHup has the socket (sockio.Conn.WatchPeer);
	// watchTried: put() asked once.
	watched, watchTried bool

	// abortFn is sock.Abort, bound once: Send registers it with the
	// request's context on every exchange.
	abortFn func()

	// replyErr is the error readReply's read of the answer met (nil:
	// none, or no read there), for exchange to fail with.
	replyErr error

	// rw writes requests to sock (reqwriter.go).
	rw reqWriter

	// sock reads and writes the socket (raw socket calls when plaintext) with the
	// lazy read deadline the relay's per-read idle bound relies on. Only
	// the exchange's goroutine reads, writes and sets deadlines; Abort
	// (the request's context ended) runs on another.
	sock sockio.Conn
}

// TLS is one rule's TLS configuration toward its engines (security 2).
// Pooled connections are keyed by address and TLS identity, so rules with
// different trust or client certificates never share a connection.
type TLS struct {
	cfg *tls.Config
	id  string
}

// NewTLS gives cfg its own connection pools: every Leg carrying the result
// is sent over TLS with cfg, on connections no other TLS value shares.
func (c *Client) NewTLS(cfg *tls.Config) *TLS {
	return &TLS{cfg: cfg, id: strconv.FormatUint(c.tlsSeq.Add(1), 10)}
}

// tlsID is the pooling identity of tc ("" plaintext).
func tlsID(tc *TLS) string {
	if tc == nil {
		return ""
	}
	return tc.id
}

const bufSize = 16 << 10

// aLongTimeAgo is a deadline in the past: it unblocks pending I/O at once.
var aLongTimeAgo = time.Unix(1, 0)

// get returns a live pooled connection to addr or dials a new one (over TLS
// when tc is set), within the endpoint's connection cap (pool.go). A dial or
// handshake failure is a *DialError, a wait given up a *PoolWaitError:
// nothing was sent either way. trusted: a pooled connection reused
// without a peek, on the hang-up watcher's word (alive).
func (c *Client) get(ctx context.Context, addr string, tc *TLS, now, dl sockio.Mono, wait time.Duration, mayTrust bool) (_ *conn, trusted bool, _ error) {
	id := tlsID(tc)
	for {
		pc, err := c.acquire(ctx, addr, id, dl, wait)
		if err != nil {
			return nil, false, err
		}
		if pc == nil {
			break // a slot is ours: dial
		}
		if ok, trusted := pc.alive(now, mayTrust); ok {
			pc.usedAt = now
			return pc, trusted, nil
		}
		c.discard(pc)
	}
	pc, err := c.dial(ctx, addr, tc)
	if err != nil {
		c.release(addr)
		return nil, false, err
	}
	pc.usedAt = now
	return pc, false, nil
}

// dial opens a new connection to addr (its slot already taken).
func (c *Client) dial(ctx context.Context, addr string, tc *TLS) (*conn, error) {
	nc, err := c.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, &DialError{Endpoint: addr, Err: err}
	}
	if tc != nil {
		tconn, err := c.handshake(ctx, nc, addr, tc)
		if err != nil {
			return nil, err
		}
		nc = tconn
	}
	pc := &conn{addr: addr, hostLine: hostLine(addr), tlsID: tlsID(tc), tls: tc != nil}
	pc.sock.Reset(nc)
	pc.br = new(bufio.Reader)
	if pc.tls {
		c.unparkReader(pc) // aliveTLS reads through it
	} // else borrowed once the first answer is readable (exchange)
	pc.abortFn = pc.sock.Abort
	pc.rw = reqWriter{pool: &c.writers, w: &pc.sock}
	pc.sock.ReleaseOnReplyWait(pc.rw.release)
	pc.sock.ReadOnReply(func() bool { return c.readReply(pc) })
	return pc, nil
}

// readReply reads the engine's first bytes into pc's read buffer from
// inside the request's wait for them (sockio.Conn.ReadOnReply), borrowing
// the buffer only now that they are there. True: the wake-up found
// nothing, wait on. A read error is kept for exchange (replyErr): the
// buffer does not keep it, and the socket would not report a reset twice.
func (c *Client) readReply(pc *conn) bool {
	if pc.br.Size() == 0 {
		c.unparkReader(pc)
	}
	_, err := pc.br.Peek(1)
	if err == sockio.ErrWouldBlock {
		return true
	}
	pc.replyErr = err
	return false
}

// handshake runs the TLS handshake to an engine, verifying its certificate
// against the endpoint's IP (ServerName) unless the rule turned verification
// off. A failure is a *DialError: no request byte was sent.
func (c *Client) handshake(ctx context.Context, nc net.Conn, addr string, tc *TLS) (net.Conn, error) {
	cfg := tc.cfg
	if host, _, err := net.SplitHostPort(addr); err == nil && cfg.ServerName == "" {
		cfg = cfg.Clone()
		cfg.ServerName = host
	}
	tconn := tls.Client(nc, cfg)
	if err := tconn.HandshakeContext(ctx); err != nil {
		_ = nc.Close()
		if c.tlsm != nil {
			c.tlsm.BackendHandshakes.WithLabelValues("failed").Inc()
		}
		return nil, &DialError{Endpoint: addr, Err: fmt.Errorf("TLS handshake: %w", err)}
	}
	if c.tlsm != nil {
		c.tlsm.BackendHandshakes.WithLabelValues("ok").Inc()
	}
	return tconn, nil
}

// put returns a connection whose last response was read completely, and
// wakes a request waiting for one.
func (c *Client) put(pc *conn) {
	// The exchange's read bound is over: left asked for, it would pass while
	// the connection idles and make alive()'s peek fail. Lifting it is lazy
	// (no socket call); the armed one, if it passes, is re-armed by the peek.
	_ = pc.sock.SetReadDeadline(time.Time{})
	if !pc.watchTried && !pc.tls {
		// Once per connection, when it is first kept (an engine that
		// closes after every answer never gets here): a hang-up that
		// came before is reported as it joins.
		pc.watchTried = true
		pc.watched = pc.sock.WatchPeer(&c.pooledHup)
	}
	if pc.sock.PeerGone() {
		c.discard(pc) // the engine hung up as it answered
		return
	}
	c.mu.Lock()
	ep := pc.ep
	if ep == nil {
		// Its first return: the entry stays in c.eps while the connection
		// is open (it counts in ep.open), so it is looked up only once.
		ep = c.eps[pc.addr]
		pc.ep = ep
	}
	if ep != nil && !c.closed && len(ep.idle) < c.maxIdle {
		pc.idleTick = c.idleTick
		ep.idle = append(ep.idle, pc)
		ep.wakeOne()
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	c.discard(pc)
}

// CloseIdle closes every pooled connection and stops pooling; exchanges in
// flight finish on their own connections, which are then closed.
func (c *Client) CloseIdle() {
	c.mu.Lock()
	var idle []*conn
	for _, ep := range c.eps {
		idle = append(idle, ep.idle...)
		ep.idle = nil
	}
	c.closed = true
	if c.reapStop != nil {
		close(c.reapStop)
		c.reapStop = nil
	}
	c.mu.Unlock()
	for _, pc := range idle {
		c.discard(pc)
	}
}

// peekAfter is how long after an exchange took a watched connection its
// next one still trusts the hang-up watcher alone, without a peek: well
// under any engine's keep-alive timeout (uvicorn's 5 s, gunicorn's 2 s),
// whose timer starts only once the engine has the request, so no idle
// close can have come sooner; and long enough for back-to-back requests
// of a loaded gateway (milliseconds apart) to skip the peek.
const peekAfter = 100 * time.Millisecond

// alive reports whether an idle connection can carry a request: nothing
// buffered, and no bytes or EOF pending on the socket, which a
// non-blocking peek (one recv(2)) finds out. When mayTrust (the request
// can be written again), a plaintext connection in pooledHup whose last
// exchange took it less than peekAfter before now skips the peek
// (trusted): a hang-up since (an engine closing idle connections, or
// closing after an answer without saying so) is the watcher's to report,
// and an engine's idle close cannot have come yet. The watcher reports
// a moment late: a request may go out on a connection the engine closed
// just before, which fails without the engine's TCP acknowledging a byte
// of it, and Send then sends it again (exchange). Bytes an engine sends
// unasked after its answer are caught when they came with it (buffered);
// in a later segment within the window they are read as the next
// answer, as with the peek those that come just after it.
func (pc *conn) alive(now sockio.Mono, mayTrust bool) (ok, trusted bool) {
	if pc.br.Buffered() > 0 {
		return false, false // unsolicited bytes: the stream is out of sync
	}
	if pc.tls {
		return pc.aliveTLS(), false
	}
	if pc.sock.PeerGone() {
		return false, false
	}
	if mayTrust && pc.watched && now.Sub(pc.usedAt) < peekAfter {
		return true, true
	}
	return pc.sock.Quiet(), false
}

// aliveTLS checks a pooled TLS connection: bytes on the socket may be
// post-handshake records (TLS 1.3 session tickets) rather than data, so the
// check reads through crypto/tls with a deadline already past. A timeout
// means nothing but control records was pending (alive); data, EOF or an
// alert (close_notify) mean the connection cannot carry a new request.
func (pc *conn) aliveTLS() bool {
	_ = pc.sock.SetReadDeadline(aLongTimeAgo) // nearer than any: set at once
	_, err := pc.br.Peek(1)
	_ = pc.sock.SetReadDeadline(time.Time{}) // the next read re-arms it
	var ne net.Error
	return err != nil && errors.As(err, &ne) && ne.Timeout()
}

// Send sends leg on a pooled connection and returns the response; its Body
// hands the connection back to the pool once read to the end (close it
// otherwise). ctx cancellation aborts the exchange at once (the connection
// is then closed, so the engine sees the client go away).
//
// Errors: a *DialError when the engine provably never got the request; a
// *PoolWaitError when no connection to the endpoint came free (at its cap)
// before ctx ended or while the engine's share of leg.HeaderWait was left
// (TimedOut; engineShare), nothing sent; a
// *ClientBodyError when leg.Stream failed on the client's side; with
// leg.HeaderWait set, an error matching os.ErrDeadlineExceeded when the
// engine was silent past it; anything else may have reached the engine.
func (c *Client) Send(ctx context.Context, leg Leg) (*http.Response, error) {
	s := leg.Stream
	if s != nil {
		// Not before the request is worth sending (streambody.go).
		if err := s.prime(); err != nil {
			return nil, err
		}
		// A body whose first read brought all of it goes out as a buffered
		// one: it can be written again, on another connection (below).
		b, ok, err := s.whole()
		if err != nil {
			return nil, err
		}
		if ok {
			leg.Body, leg.Stream = b, nil
		}
	}
	// HeaderWait counts from here: a wait for a free connection at the
	// endpoint's cap spends the same budget as the engine's silence, and
	// ends while the engine's share of it is still left (engineShare).
	now := leg.From
	if now == sockio.NoDeadline {
		now = sockio.Now()
	}
	// NoDeadline clears one left by the connection's previous use. An
	// integer (sockio.Mono): a Time.Add here was ~74 instructions, and
	// get, acquire and the socket compare it as one.
	dl := sockio.NoDeadline
	if leg.HeaderWait > 0 {
		dl = now.Add(leg.HeaderWait)
	}
	// get runs here, not in exchange: a dial under exchange's frame as well
	// ran deep enough to grow some stream goroutines' stacks to 16 KiB,
	// kept while their streams are open (docs/performance.md).
	addr := leg.Endpoint.ID
	pc, trusted, err := c.get(ctx, addr, leg.TLS, now, dl, leg.HeaderWait, leg.Stream == nil)
	var resp *http.Response
	again := false
	if err == nil {
		resp, err, again = c.exchange(ctx, pc, trusted, &leg, dl)
	}
	if again {
		// The connection reused without a peek had been closed by the
		// engine before the request reached it: once more, peeked or new.
		if pc, _, err = c.get(ctx, addr, leg.TLS, now, dl, leg.HeaderWait, false); err == nil {
			resp, err, _ = c.exchange(ctx, pc, false, &leg, dl)
		}
	}
	if s != nil && leg.Stream == nil && (err == nil || !NotSent(err)) { // NotSent allocates
		s.releaseHead() // written: a retry after a failed dial needs it, nothing else
	}
	return resp, err
}

// exchange is one try of Send on pc, a connection from get (trusted: reused
// on the hang-up watcher's word, without a peek). again: the try failed on
// a trusted connection, and the engine never had the request, so it may go
// out again: the socket took none of it (a reset had come in first), or the
// exchange ended at the engine's FIN with no byte of it acknowledged (it
// had closed the connection before: a reset answers the bytes).
//
// leg is Send's, by pointer: a Leg is some 200 bytes, which the exchange,
// the request's writer and its head's writer each copied.
func (c *Client) exchange(ctx context.Context, pc *conn, trusted bool, leg *Leg, dl sockio.Mono) (_ *http.Response, _ error, again bool) {
	addr := leg.Endpoint.ID
	var err error
	pc.setDeadline(dl) // also bounds writing the request to a stuck engine
	stop := afterDone(ctx, pc.abortFn)
	into := leg.Into
	// resetInto puts into back to its request id alone (Leg.Into): every
	// other field goes, so the id needs no lookup before the exchange
	// (the parse never stores the engine's).
	resetInto := func() {
		for k := range into {
			if k != headerRequestID {
				delete(into, k)
			}
		}
	}
	base := pc.sock.Written()
	fail := func(err error) (*http.Response, error, bool) {
		resetInto()
		stop()
		// Nothing of the request handed to the socket (a reset in before
		// it: the write fails whole), or the engine's FIN with none of it
		// acknowledged: either way the engine cannot have read it.
		again := trusted && ctx.Err() == nil &&
			(pc.sock.Written() == base || closedBefore(err) && pc.noneAcked(base))
		c.discard(pc)
		if cerr := context.Cause(ctx); cerr != nil {
			err = fmt.Errorf("%w (%w)", err, cerr)
		}
		return nil, err, again
	}
	method := leg.method()
	bw := &pc.rw
	bw.err = nil
	if leg.Stream != nil {
		err = writeStreamed(ctx, pc, bw, method, leg, leg.Stream)
	} else {
		err = writeRequest(bw, pc, method, leg)
	}
	bw.release() // what an error left unwritten is dropped
	if err != nil {
		var cbe *ClientBodyError
		if errors.As(err, &cbe) {
			return fail(err)
		}
		return fail(fmt.Errorf("writing request to %s: %w", addr, err))
	}
	if err := pc.replyErr; err != nil {
		// readReply read the answer's first bytes inside flushAwait's
		// wait and met this instead (readHead's first read would have).
		pc.replyErr = nil
		return fail(fmt.Errorf("reading response from %s: %w", addr, err))
	}
	if pc.br.Size() == 0 {
		// Borrowed only now that the answer is readable (flushAwait
		// waited for it): a stream waiting for its engine's first byte
		// holds no read buffer either. (readReply borrows it inside the
		// wait when it can.)
		c.unparkReader(pc)
	}
	var ur *response
	for {
		ur = c.newResponse()
		var rb io.Reader
		if leg.Fields && into != nil {
			rb, err = readResponseFields(ur, pc.br, method, into)
		} else {
			rb, err = readResponseInto(ur, pc.br, method, into)
		}
		if err != nil {
			return fail(fmt.Errorf("reading response from %s: %w", addr, err))
		}
		if ur.resp.StatusCode >= 200 || ur.resp.StatusCode == http.StatusSwitchingProtocols {
			ur.body = body{c: c, pc: pc, r: rb, stop: stop, reuse: !ur.resp.Close, hopFree: !ur.hopField, fields: ur.body.fields}
			break // skip 1xx interim responses
		}
		resetInto()
	}
	ur.resp.Body = &ur.body
	return &ur.resp, nil, false
}

// closedBefore reports whether err is what a request sent on a connection
// the engine had closed ends with: the engine's FIN, read as the end of
// stream (or, on a write, EPIPE: Linux's error for a reset that followed
// the FIN). Not a reset without a FIN first (ECONNRESET): an engine that
// read the request and then closed abortively (a crash with bytes unread,
// SO_LINGER 0) sends one, and it acknowledges nothing, so bytes_acked
// cannot tell that engine from one that never had the request: its TCP
// may not have acknowledged them yet (a delayed ACK waiting for the
// answer, usual once a connection has had an exchange). A FIN does
// acknowledge every byte the engine's TCP had, and the engine can read no
// other, so a FIN with none acknowledged is proof.
func closedBefore(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.EPIPE)
}

// noneAcked reports whether the engine's TCP acknowledged none of the
// bytes written to pc after the first base (false when it cannot tell).
// Linux counts the SYN among the bytes acknowledged (one, for the side
// that dialled: a fresh connection reports 1).
func (pc *conn) noneAcked(base uint64) bool {
	acked, ok := pc.sock.PeerAcked()
	return ok && acked <= base+1
}

// response is everything one engine response needs on the heap, in one
// allocation instead of five (response, body, framing, header values).
type response struct {
	resp http.Response
	body body
	lb   lengthBody
	// vals is the backing array for up to 14 single-valued headers, or
	// (Leg.Fields) for up to 6 fields as name, value pairs and the two
	// strings the datapath adds: engines' usual answers (uvicorn's date,
	// server, content-length or transfer-encoding, content-type; an
	// echoed request id, a cache-control on a stream) without a second
	// array (parseHead's make, 192 bytes or more, for a fifth field
	// when it held ten).
	vals [14]string
	// hopField: the head held a field named by hop.Headers (parseHead).
	hopField bool
	// head is the room the head string is copied into when it fits
	// (headString): written once, never recycled. Last, and free of
	// pointers, so the collector's scan of a response stops before it.
	head [headRoom]byte
}

// responseBatch is responses allocated together and handed out one by
// one (newResponse): one malloc for four answers where each took one.
// Each is handed out once, zeroed as allocated, and never reused, so an
// answer's strings (its head room) and fields stay as parsed for as long
// as anything holds them; the collector frees the batch once nothing
// points into it.
//
// What a kept answer pins: its batch, 3 KiB where the answer alone was
// 768 B, and what its finished batch-mates point to (their header maps,
// bodies' framing) until it ends. Batches are per Client, not per
// engine connection, so answers taken together (streams opened in a
// burst) share one batch and an open SSE stream's share stays 768 B; a
// stream among short answers pins at most three of theirs.
type responseBatch struct {
	taken atomic.Uint32 // responses handed out, or claimed by a racing newResponse
	rs    [4]response
}

// newResponse returns a zeroed response for one engine answer, out of
// c's current batch while it has one left, else out of a new batch.
// Two callers that find the batch spent both make one; the one stored
// last is used on (the other's spare answers are collected with it).
func (c *Client) newResponse() *response {
	if b := c.responses.Load(); b != nil {
		if i := b.taken.Add(1) - 1; i < uint32(len(b.rs)) {
			return &b.rs[i]
		}
	}
	b := new(responseBatch)
	b.taken.Store(1)
	c.responses.Store(b)
	return &b.rs[0]
}

// writeRequest writes an HTTP/1.1 request head and leg.Body. Header values
// come from net/http's parser (or our own code), so they carry no CR/LF.
func writeRequest(w *reqWriter, pc *conn, method string, leg *Leg) error {
	writeHead(w, pc.hostLine, method, leg)
	withCL := leg.Body != nil || method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch
	if w.room(len(headerContentLength) + 2 + 20 + 4 + len(leg.Body)) {
		// The usual small request: the rest appended at once, where the
		// calls below check the room and the error five times.
		b := w.buf
		if withCL {
			b = append(b, headerContentLength+": "...)
			b = strconv.AppendInt(b, int64(len(leg.Body)), 10)
			b = append(b, '\r', '\n')
		}
		b = append(b, '\r', '\n')
		w.buf = append(b, leg.Body...)
		return flushAwait(w, pc)
	}
	if withCL {
		w.WriteString(headerContentLength + ": ")
		w.Write(strconv.AppendInt(w.AvailableBuffer(), int64(len(leg.Body)), 10)) // no scratch to escape
		w.WriteString("\r\n")
	}
	w.WriteString("\r\n")
	w.Write(leg.Body)
	return flushAwait(w, pc)
}

// flushAwait flushes the end of a request to pc and waits there for the
// engine's answer to be readable (sockio.Conn.AwaitReply: no read that
// finds the socket empty). pc came out of get(): dialled, or pooled and
// found quiet (by the peek, or within peekAfter by the hang-up watcher:
// alive, which says what that misses), so nothing of the engine's is
// pending before the request.
// A request past the writer's buffer has had its head flushed already,
// and an engine may answer that before the body ends: sockio then skips
// the wait (it waits only on a first write since the last read). That
// covers streamed bodies too: one that fits the buffer (the usual small
// POST on a rule that does not route on its body) reaches the engine in
// this one flush, after the client's body ended, so the engine cannot
// have answered before it; a longer one was flushed in part already, and
// its last flush does not wait.
func flushAwait(w *reqWriter, pc *conn) error {
	pc.sock.AwaitReply(true)
	err := w.Flush()
	pc.sock.AwaitReply(false)
	return err
}

// writeHead buffers the request line, ended by host (hostLine), and the
// leg's end-to-end fields (framing fields are the caller's): leg.List's
// when it has one, else leg.Header's.
func writeHead(w *reqWriter, host, method string, leg *Leg) {
	target := leg.Path
	if target == "" {
		target = "/"
	}
	line := len(method) + len(" ") + len(target) + len(host)
	if l := &leg.List; l.Names != nil {
		// The usual head: appended into the buffer's room with no check
		// of it per field (writeField's, with the error's and a store
		// of the buffer), and kept if it fit, append having not moved it.
		if w.room(line) {
			if b := l.appendTo(appendRequestLine(w.buf, method, target, host)); cap(b) == cap(w.buf) {
				w.buf = b
				return
			}
		}
		// Longer than the room (rare; append's copy is dropped): written
		// from Header as any other head, with l's two put into it (Leg.List).
		if leg.Header == nil {
			leg.Header = make(http.Header, 2)
		}
		l.SetInto(leg.Header)
		leg.List = HeadList{}
	}
	if w.room(line) {
		w.buf = appendRequestLine(w.buf, method, target, host)
	} else {
		w.WriteString(method)
		w.WriteByte(' ')
		w.WriteString(target)
		w.WriteString(host)
	}
	for k, vv := range leg.Header {
		if k == headerHost || k == headerContentLength || k == headerTE {
			continue
		}
		for _, v := range vv {
			w.writeField(k, v)
		}
	}
}

// hostLine is the end of a request line to addr with the Host field
// that follows it, the same for every request on a connection.
func hostLine(addr string) string {
	return " HTTP/1.1\r\n" + headerHost + ": " + addr + "\r\n"
}

// appendRequestLine appends the request line, ended by host (hostLine),
// to b.
func appendRequestLine(b []byte, method, target, host string) []byte {
	b = append(b, method...)
	b = append(b, ' ')
	b = append(b, target...)
	return append(b, host...)
}

// appendTo appends l's field lines to b: the listed fields but those
// replaced, in order, then the caller's two.
func (l *HeadList) appendTo(b []byte) []byte {
	for i, c := 0, l.Codes; c != 0; i, c = i+1, c>>8 {
		if k := l.Names[c&0xff-1]; !l.replaced(k) {
			b = appendField(b, k, l.Values[i])
		}
	}
	if l.RequestID != "" {
		b = appendValue(append(b, headerRequestID+": "...), l.RequestID)
	}
	if l.ForwardedFor != "" {
		b = appendValue(append(b, headerForwardedFor+": "...), l.ForwardedFor)
	}
	return b
}

// The relay bounds engine silence on Client bodies with read deadlines.
var _ BoundedBody = (*body)(nil)

// body returns the connection to the pool when the response was read to
// its end, and closes it otherwise (a half-read body cannot be reused).
type body struct {
	c     *Client
	pc    *conn
	r     io.Reader // the framed body (length, chunked, until close)
	stop  func() bool
	reuse bool
	done  bool
	// hopFree: the head stored no hop-by-hop field (HopFree).
	hopFree bool
	// fields are the head's fields as name, value pairs when they were
	// parsed so (Leg.Fields), else nil (Fields).
	fields []string
}

// HopFree reports whether resp is a Client's answer whose head held no
// field named by hop.Headers (so no Connection naming others either):
// its header map then needs no hop.Strip, provided the map held no hop
// field before the parse (Leg.Into) and nothing added one since. Any other
// response (another Sender's, a wrapped body) reports false: strip it.
// Why: hop.Strip walks the whole map per answer, and engines almost never
// send a hop field.
func HopFree(resp *http.Response) bool {
	b, ok := resp.Body.(*body)
	return ok && b.hopFree
}

// Fields returns the fields of resp's head as name, value pairs (names
// canonical or interned, as Leg.Into's keys; values trimmed; the
// engine's X-Request-Id left out) and true when resp is a Client's answer
// to a leg with Fields set whose head went to the pairs: then resp.Header
// is the leg's Into map with nothing of the engine's in it, the head held
// no hop-by-hop field (HopFree) and at most one Content-Length. The
// pairs are in the head's order; the slice has room for two more strings.
// False: the fields are in resp.Header, as without Leg.Fields.
func Fields(resp *http.Response) ([]string, bool) {
	b, ok := resp.Body.(*body)
	if !ok || b.fields == nil {
		return nil, false
	}
	return b.fields, true
}

func (b *body) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n, err := b.r.Read(p)
	if err == io.EOF {
		b.finish(true)
	}
	return n, err
}

// Buffered reports whether the rest of the body is already in the
// connection's read buffer, so reading it cannot block and needs no
// deadline (the common small JSON answer: one timer update saved).
func (b *body) Buffered() bool {
	switch r := b.r.(type) {
	case *lengthBody:
		return r.n <= int64(b.pc.br.Buffered())
	case nil:
		return true
	}
	return b.done || b.r == http.NoBody
}

// SetReadDeadline bounds the next reads of the body (idle timeouts).
func (b *body) SetReadDeadline(t time.Time) { _ = b.pc.sock.SetReadDeadline(t) }

func (b *body) Close() error {
	if !b.done {
		b.finish(false)
	}
	return nil
}

func (b *body) finish(complete bool) {
	b.done = true
	notCanceled := b.stop()
	if complete && b.reuse && notCanceled {
		b.c.put(b.pc)
		return
	}
	b.c.discard(b.pc)
}

// afterDoner is a context that runs a function once it ends at less cost
// than context.AfterFunc (the lean front end's connection context), with
// a stop that may be called at most once.
type afterDoner interface {
	AfterDone(f func()) (stop func() bool)
}

// afterDone is context.AfterFunc(ctx, f), through ctx's own AfterDone when
// it has one. Send calls the returned stop exactly once (fail or the body's
// finish).
func afterDone(ctx context.Context, f func()) (stop func() bool) {
	if a, ok := ctx.(afterDoner); ok {
		return a.AfterDone(f)
	}
	return context.AfterFunc(ctx, f)
}
