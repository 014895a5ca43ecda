// Package admission is the first layer of the front door: a net.Listener
// wrapper that decides, at accept time and before a single byte is read,
// whether a client connection may be served.
//
// One Gate is shared by every VIP listener of the daemon. It enforces
//   - a global cap on open client connections (Options.MaxConns; by default
//     derived from RLIMIT_NOFILE so file descriptors stay free for upstream
//     connections, health probes, KV-event sockets and the management API,
//     none of which pass through the gate);
//   - a cap per client address across all VIPs (Options.MaxConnsPerIP);
//   - a cap per listener (Listener.SetLimit; the datapath sets it from the
//     rules' connectionLimit).
//
// At the global cap a newcomer evicts the connection idle longest (the HTTP
// layer reports idleness with MarkIdle / MarkBusy), if it has been idle for
// Options.EvictIdleAfter; otherwise, and over the other caps, it is refused.
// A connection over a cap is closed at once (RST, no read, no TLS
// handshake, no goroutine) and counted in
// infergate_edge_connections_refused_total{reason}. Accepted connections
// release their slot exactly once, when closed.
//
// The wrapper returns plain net.Conn values, so the next layer (TLS,
// then HTTP) wraps it like any listener. Idle keep-alive connections are
// bounded by Options.IdleTimeout, which the HTTP layer applies.
package admission
