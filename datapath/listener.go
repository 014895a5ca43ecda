package datapath

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/admission"
	"github.com/infergate/infergate/tlsmat"
)

// listener is one bound VIP:port and the rules served on it.
type listener struct {
	rt     *Runtime
	addr   netip.AddrPort      // the bound address (0.0.0.0:port under BindAnyVIP)
	adm    *admission.Listener // the bound socket behind the admission layer
	nl     net.Listener        // what HTTP serves: adm, or TLS over adm
	srv    *http.Server
	front  frontServer // what serves nl: srv, or the lean server (frontend.go)
	table  atomic.Pointer[routeTable]
	rules  []*ruleState     // control plane copy (rt.mu)
	served chan struct{}    // closed when Serve returned
	fe     *tlsmat.Frontend // TLS layer (security 1/2); nil for plaintext
}

// newListener builds the front door on the bound socket nl: admission →
// TLS (fe, when the listener serves TLS rules) → HTTP. Admission comes
// first so a refused connection never costs a handshake.
func (rt *Runtime) newListener(addr netip.AddrPort, nl net.Listener, fe *tlsmat.Frontend) *listener {
	adm := rt.gate.Wrap(nl)
	nl = adm
	if fe != nil {
		nl = fe.Listener(adm)
	}
	ln := &listener{rt: rt, addr: addr, adm: adm, nl: nl, fe: fe, served: make(chan struct{})}
	ln.table.Store(&routeTable{})
	ln.srv = &http.Server{
		Handler:           ln.admitRequests(ln), // each request (h2 stream) in flight takes an admission slot
		ReadHeaderTimeout: rt.opts.ReadHeaderTimeout,
		// The body deadline is net/http's own read deadline (it sets one per
		// request anyway); the handler lifts it once the body is in, so
		// long responses and disconnect detection are not cut by it.
		ReadTimeout: rt.opts.BodyReadTimeout,
		IdleTimeout: rt.opts.Admission.IdleTimeout,
		ConnState:   ln.connState,
		ErrorLog:    newStdLogger(rt.log),
		HTTP2:       &http.HTTP2Config{MaxConcurrentStreams: rt.opts.Admission.MaxStreamsPerConn},
	}
	if fe != nil {
		ln.srv.ConnContext = fe.ConnContext // records each handshake's site (siteServes)
		ln.srv.ConnState = func(c net.Conn, st http.ConnState) {
			ln.connState(c, st)
			fe.ConnState(c, st) // handshake counters
		}
	}
	ln.front = ln.frontServer()
	return ln
}

// connState tells the admission layer which connections are idle (no
// request in progress), the ones it may evict at the global cap.
func (ln *listener) connState(c net.Conn, s http.ConnState) {
	switch s {
	case http.StateNew, http.StateIdle:
		ln.rt.gate.MarkIdle(c)
	case http.StateActive, http.StateHijacked, http.StateClosed:
		ln.rt.gate.MarkBusy(c)
	}
}

// connIdle is connState's report of a connection gone idle after a
// request, with the moment it did (h1's reading for its idle deadline).
func (ln *listener) connIdle(c net.Conn, at time.Time) {
	ln.rt.gate.MarkIdleAt(c, at)
}

// applyConnectionLimit sets the VIP's connection cap from its rules'
// connectionLimit: the smallest non-zero one wins, because a connection is
// admitted before its first request says which rule it is for, and the
// strictest operator intent must hold for every rule on the address.
// Control plane only (rt.mu).
func (ln *listener) applyConnectionLimit() {
	limit := 0
	for _, rs := range ln.rules {
		if c := rs.cur.Load(); c != nil {
			if n := c.rule.ConnectionLimit; n > 0 && (limit == 0 || n < limit) {
				limit = n
			}
		}
	}
	ln.adm.SetLimit(limit)
}

// start serves in the background; the socket is already bound, so no error
// can surface after Install returned.
func (ln *listener) start() {
	go func() {
		defer close(ln.served)
		err := ln.front.Serve(ln.nl)
		if err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			ln.rt.log.WithField("listen", ln.addr.String()).WithError(err).Error("listener stopped")
		}
	}()
}

// closeSocket stops accepting at once so the address is free again.
func (ln *listener) closeSocket() { _ = ln.nl.Close() }

// drain closes the socket, lets in-flight requests finish for up to grace,
// then cuts whatever is left.
func (ln *listener) drain(grace time.Duration) {
	ln.closeSocket()
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := ln.shutdown(ctx); err != nil {
		ln.rt.log.WithField("listen", ln.addr.String()).WithError(err).Warn("drain grace over; closing remaining connections")
		_ = ln.front.Close()
	}
	<-ln.served
}

// shutdown waits for active connections to go idle. The socket is already
// closed by then, so Shutdown's own close of it reports net.ErrClosed, which
// is not a failure.
func (ln *listener) shutdown(ctx context.Context) error {
	if err := ln.front.Shutdown(ctx); err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}
