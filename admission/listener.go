package admission

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/metrics"
)

// Gate holds the counts shared by every listener it wraps.
type Gate struct {
	opts  Options
	m     *metrics.Edge // nil: not counted
	total atomic.Int64

	conns addrShares // connections per source address

	// Idle connections, longest idle first (evictable at the global cap).
	idleMu sync.Mutex
	idle   idleList

	// Requests in flight (requests.go).
	inflight atomic.Int64
	reqs     requestState
}

// New builds a Gate. m may be nil.
func New(opts Options, m *metrics.Edge) *Gate {
	g := &Gate{opts: opts, m: m}
	g.conns.limit = opts.MaxConnsPerIP
	g.reqs.global, g.reqs.perIP.limit = opts.requestCaps()
	if m != nil {
		m.CountRequestsFrom(g.InFlight)
	}
	return g
}

// Options returns the options the gate was built with.
func (g *Gate) Options() Options { return g.opts }

// Open is the number of client connections currently admitted.
func (g *Gate) Open() int { return int(g.total.Load()) }

// Wrap returns a listener that admits nl's connections through the gate.
// Closing it closes nl; connections already admitted are unaffected.
func (g *Gate) Wrap(nl net.Listener) *Listener {
	return &Listener{Listener: nl, g: g}
}

// Listener is one admitted VIP listener.
type Listener struct {
	net.Listener
	g       *Gate
	limit   atomic.Int64 // 0: no per-listener cap (connections and requests alike)
	open    atomic.Int64
	reqOpen atomic.Int64 // requests in flight (requests.go)
}

// SetLimit sets the listener's own cap (0: none). Lowering it closes no
// connection; it only refuses new ones until the count is below it.
func (l *Listener) SetLimit(n int) { l.limit.Store(int64(max(n, 0))) }

// Open is the number of connections this listener has admitted and not
// yet seen closed.
func (l *Listener) Open() int { return int(l.open.Load()) }

// Accept returns the next admitted connection. Connections over a cap are
// closed here and never reach the caller.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := remoteIP(c)
		if reason := l.admit(ip); reason != "" {
			if l.g.m != nil { // counted first: the client may look as soon as it is reset
				l.g.m.Refused.WithLabelValues(reason).Inc()
			}
			refuse(c)
			continue
		}
		if l.g.m != nil {
			l.g.m.Connections.Inc()
		}
		return &conn{Conn: c, l: l, ip: ip}, nil
	}
}

// admit takes a slot on every level or none, and returns the refusing
// level's reason ("" when admitted). Counts are optimistic adds rolled back
// on refusal, so concurrent accepts on different listeners never overshoot
// a cap. Taken narrowest first, as requests' are (EnterRequest): the
// address's share, the listener's, then the gateway's, whose full cap
// evicts an idle connection. So a client over its own share is refused
// before it can evict another client's connection, and a refused
// connection never held a slot other addresses need.
func (l *Listener) admit(ip netip.Addr) string {
	g := l.g
	if !g.conns.take(ip) {
		return metrics.RefusedPerIP
	}
	if lim := l.limit.Load(); l.open.Add(1) > lim && lim > 0 {
		l.open.Add(-1)
		g.conns.give(ip)
		return metrics.RefusedListener
	}
	if !g.takeGlobal() {
		l.open.Add(-1)
		g.conns.give(ip)
		return metrics.RefusedGlobal
	}
	return ""
}

// takeGlobal takes a slot under the global cap; at the cap it evicts the
// longest-idle connection once (Options.EvictIdleAfter) and tries again.
func (g *Gate) takeGlobal() bool {
	if g.opts.MaxConns <= 0 {
		g.total.Add(1)
		return true
	}
	for evicted := false; ; evicted = true {
		if g.total.Add(1) <= int64(g.opts.MaxConns) {
			return true
		}
		g.total.Add(-1)
		if evicted || !g.evictIdle() {
			return false
		}
	}
}

// evictIdle ends the connection idle longest, if it has been idle for
// EvictIdleAfter; its slots are free before this returns (conn.evict).
func (g *Gate) evictIdle() bool {
	if g.opts.EvictIdleAfter <= 0 {
		return false
	}
	g.idleMu.Lock()
	c := g.idle.front()
	for c != nil && c.busy.Load() {
		g.idle.remove(c) // busy since its idle mark (MarkBusy leaves it listed); its next MarkIdle lists it again
		c = g.idle.front()
	}
	if c == nil || time.Since(c.idleSince) < g.opts.EvictIdleAfter {
		g.idleMu.Unlock()
		return false
	}
	g.idle.remove(c)
	g.idleMu.Unlock()
	if g.m != nil {
		g.m.Evicted.Inc()
	}
	c.evict()
	return true
}

// MarkIdle records that c (a connection this gate admitted) has no request
// in progress: it was just accepted or finished a keep-alive request. The
// HTTP layer calls it from its connection-state hook.
func (g *Gate) MarkIdle(nc net.Conn) { g.MarkIdleAt(nc, time.Time{}) }

// MarkIdleAt is MarkIdle with the moment c went idle, a clock reading the
// HTTP layer made anyway (zero: MarkIdle reads the clock).
func (g *Gate) MarkIdleAt(nc net.Conn, now time.Time) {
	c := admitted(nc)
	if c == nil || g.opts.EvictIdleAfter <= 0 || g.opts.MaxConns <= 0 {
		return
	}
	if now.IsZero() {
		now = time.Now()
	}
	g.idleMu.Lock()
	if c.closed.Load() {
		g.idleMu.Unlock()
		return
	}
	if c.inIdle {
		g.idle.remove(c)
	}
	c.idleSince = now
	c.busy.Store(false)
	g.idle.pushBack(c)
	g.idleMu.Unlock()
}

// MarkBusy records that c started a request: it is not evictable until
// MarkIdle. It only sets c's busy flag, without the gate's lock: c stays
// on the idle list, and the eviction that finds it there busy takes it
// off (evictIdle). Why: every request marks its connection busy and then
// idle, and this took the one lock all connections share a second time
// per request.
func (g *Gate) MarkBusy(nc net.Conn) {
	if c := admitted(nc); c != nil {
		c.busy.Store(true)
	}
}

// unlist takes c off the idle list for good (c is closing).
func (g *Gate) unlist(c *conn) {
	g.idleMu.Lock()
	if c.inIdle {
		g.idle.remove(c)
	}
	g.idleMu.Unlock()
}

// release gives back the slots admit took.
func (l *Listener) release(ip netip.Addr) {
	g := l.g
	g.conns.give(ip)
	l.open.Add(-1)
	g.total.Add(-1)
	if g.m != nil {
		g.m.Connections.Dec()
	}
}

// refuse closes a connection as cheaply as possible: a reset frees the
// socket at once, with no TIME_WAIT on the gateway's side.
func refuse(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// remoteIP is c's client address; unknown addresses share one bucket.
func remoteIP(c net.Conn) netip.Addr { return AddrIP(c.RemoteAddr()) }

// admitted finds the gate's conn under layers that wrap it and expose
// NetConn (crypto/tls does), or nil.
func admitted(nc net.Conn) *conn {
	for range 4 {
		if c, ok := nc.(*conn); ok {
			return c
		}
		u, ok := nc.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		nc = u.NetConn()
	}
	return nil
}

// conn is an admitted connection; Close releases its slots once.
type conn struct {
	net.Conn
	l      *Listener
	ip     netip.Addr
	closed atomic.Bool

	// Idle list membership (Gate.idleMu). A listed conn may be busy
	// (MarkBusy does not take the lock): eviction skips and unlists it.
	prev, next *conn
	inIdle     bool
	idleSince  time.Time
	busy       atomic.Bool
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.releaseOnce()
	return err
}

// releaseOnce gives back c's slots and takes it off the idle list, once.
func (c *conn) releaseOnce() {
	if c.closed.CompareAndSwap(false, true) {
		c.l.g.unlist(c)
		c.l.release(c.ip)
	}
}

// evict ends c for a newcomer at the global cap without waiting for it:
// the slots are free and the client sees the connection end (shutdown)
// before evict returns; the descriptor is closed on another goroutine. A
// request may start on c in the instant it is chosen, and the HTTP layer
// serves requests inside the socket's read wait (datapath/h1), where a
// Close waits until that request returns — the accept path must not.
func (c *conn) evict() {
	c.releaseOnce()
	if tc, ok := c.Conn.(*net.TCPConn); ok {
		_ = tc.CloseRead()
		_ = tc.CloseWrite()
	}
	go func() { _ = c.Conn.Close() }()
}

// idleList is an intrusive doubly linked list of conns (no allocation per
// request on the hot path).
type idleList struct{ head, tail *conn }

func (l *idleList) front() *conn { return l.head }

func (l *idleList) pushBack(c *conn) {
	c.prev, c.next, c.inIdle = l.tail, nil, true
	if l.tail != nil {
		l.tail.next = c
	} else {
		l.head = c
	}
	l.tail = c
}

func (l *idleList) remove(c *conn) {
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		l.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		l.tail = c.prev
	}
	c.prev, c.next, c.inIdle = nil, nil, false
}

// NetConn returns the underlying connection (the convention of crypto/tls
// and net/http's ResponseController for wrapped conns).
func (c *conn) NetConn() net.Conn { return c.Conn }
