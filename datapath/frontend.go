package datapath

import (
	"context"
	"fmt"
	"net"
	"net/http"

	"github.com/infergate/infergate/admission"
	"github.com/infergate/infergate/datapath/h1"
)

// The HTTP servers a plaintext listener can run (Options.HTTPFrontEnd).
// TLS listeners always run net/http, which negotiates HTTP/2 by ALPN.
const (
	// FrontEndLean is datapath/h1: requests parsed straight off the
	// connection's buffer, one goroutine per connection, strict RFC 9112
	// framing.
	FrontEndLean = "lean"
	// FrontEndNetHTTP is the standard library's server.
	FrontEndNetHTTP = "net/http"
)

// DefaultFrontEnd is the plaintext front end unless configured: the lean
// server, which costs less CPU and memory per request and per open stream
// than net/http's in the same run (docs/performance.md).
const DefaultFrontEnd = FrontEndLean

// CheckFrontEnd reports an HTTPFrontEnd that names no front end.
func (o Options) CheckFrontEnd() error {
	switch o.HTTPFrontEnd {
	case "", FrontEndLean, FrontEndNetHTTP:
		return nil
	}
	return fmt.Errorf("datapath: http-frontend %q: want %q or %q", o.HTTPFrontEnd, FrontEndLean, FrontEndNetHTTP)
}

// frontServer is what a listener needs of its HTTP server: net/http's
// *http.Server and *h1.Server both are one.
type frontServer interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
	Close() error
}

// frontServer picks the listener's HTTP server: net/http for TLS (ALPN may
// choose HTTP/2) and when configured, else the lean HTTP/1.1 server with
// the same handler, timeouts and connection-state reports.
func (ln *listener) frontServer() frontServer {
	if ln.fe != nil {
		return ln.srv
	}
	if ln.rt.opts.HTTPFrontEnd == FrontEndNetHTTP {
		return gatedServer{ln.srv}
	}
	if ln.rt.watch == nil { // rt.mu: listeners are built under it
		ln.rt.watch = h1.NewWatcher()
	}
	return &h1.Server{
		Watcher:           ln.rt.watch, // one epoll set and goroutine for every VIP
		Handler:           ln.srv.Handler,
		ReadHeaderTimeout: ln.srv.ReadHeaderTimeout,
		ReadTimeout:       ln.srv.ReadTimeout,
		IdleTimeout:       ln.srv.IdleTimeout,
		ConnState:         ln.connState,
		ConnIdle:          ln.connIdle,
		RemoteIP:          admission.RemoteIP, // requestIP: once per connection
		ErrorLog:          ln.srv.ErrorLog,
	}
}

// gatedServer is net/http's server on a plaintext listener behind the lean
// parser's framing check (h1.GateListener), so both front ends refuse the
// same ambiguous heads.
type gatedServer struct{ *http.Server }

func (s gatedServer) Serve(l net.Listener) error {
	return s.Server.Serve(h1.GateListener(l, s.ReadHeaderTimeout))
}
