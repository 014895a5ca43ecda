package datapath

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/tlsmat"
)

// listener is one bound VIP:port and the rules served on it.
type listener struct {
	rt     *Runtime
	addr   netip.AddrPort // the bound address (0.0.0.0:port under BindAnyVIP)
	nl     net.Listener
	srv    *http.Server
	table  atomic.Pointer[routeTable]
	rules  []*ruleState     // control plane copy (rt.mu)
	served chan struct{}    // closed when Serve returned
	fe     *tlsmat.Frontend // TLS layer (security 1/2); nil for plaintext
}

// newListener builds the front door on the bound socket nl: admission →
// TLS (fe, when the listener serves TLS rules) → HTTP.
func (rt *Runtime) newListener(addr netip.AddrPort, nl net.Listener, fe *tlsmat.Frontend) *listener {
	if fe != nil {
		nl = fe.Listener(nl)
	}
	ln := &listener{rt: rt, addr: addr, nl: nl, fe: fe, served: make(chan struct{})}
	ln.table.Store(&routeTable{})
	ln.srv = &http.Server{
		Handler:           ln,
		ReadHeaderTimeout: rt.opts.ReadHeaderTimeout,
		// The body deadline is net/http's own read deadline (it sets one per
		// request anyway); the handler lifts it once the body is in, so
		// long responses and disconnect detection are not cut by it.
		ReadTimeout: rt.opts.BodyReadTimeout,
		IdleTimeout: rt.opts.ClientIdleTimeout,
		ErrorLog:    newStdLogger(rt.log),
	}
	if fe != nil {
		ln.srv.ConnState = fe.ConnState // handshake counters
	}
	return ln
}

// start serves in the background; the socket is already bound, so no error
// can surface after Install returned.
func (ln *listener) start() {
	go func() {
		defer close(ln.served)
		err := ln.srv.Serve(ln.nl)
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
		_ = ln.srv.Close()
	}
	<-ln.served
}

// shutdown waits for active connections to go idle. The socket is already
// closed by then, so Shutdown's own close of it reports net.ErrClosed, which
// is not a failure.
func (ln *listener) shutdown(ctx context.Context) error {
	if err := ln.srv.Shutdown(ctx); err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}
