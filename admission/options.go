package admission

import (
	"syscall"
	"time"
)

// Options are the admission caps. Zero or negative caps mean "no cap".
type Options struct {
	// MaxConns caps client connections over all VIP listeners.
	MaxConns int `yaml:"max-client-conns"`
	// MaxConnsPerIP caps client connections from one source address (all
	// VIPs together). IPv4-mapped IPv6 addresses count as their IPv4 form.
	MaxConnsPerIP int `yaml:"max-conns-per-ip"`
	// IdleTimeout closes a keep-alive client connection that has been idle
	// this long between requests (applied by the HTTP layer).
	IdleTimeout time.Duration `yaml:"client-idle-timeout"`
	// EvictIdleAfter: at the global cap, a new connection evicts the
	// connection that has been idle longest (no request in progress: never
	// sent one, or between keep-alive requests), if it has been idle at
	// least this long, instead of being refused. A flood of idle
	// connections then cannot lock out new clients. 0 disables eviction.
	EvictIdleAfter time.Duration `yaml:"evict-idle-after"`

	// MaxRequests caps requests in flight over all VIP listeners (every
	// HTTP/2 stream counts, as does each HTTP/1.1 request). Each one holds
	// an engine connection, so this, not the client connection count, is
	// what bounds engine sockets. 0: the same as MaxConns (HTTP/1.1 load is
	// then never refused by it: it has one request per connection at most);
	// negative: no cap.
	MaxRequests int `yaml:"max-inflight-requests"`
	// MaxRequestsPerIP caps requests in flight from one source address. 0:
	// the same as MaxConnsPerIP; negative: no cap.
	MaxRequestsPerIP int `yaml:"max-inflight-requests-per-ip"`
	// MaxStreamsPerConn is the HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS the
	// VIPs announce. 0: net/http's default (250).
	MaxStreamsPerConn int `yaml:"max-streams-per-conn"`
}

// Reserve is the number of file descriptors DefaultOptions keeps out of the
// client cap for everything that does not pass the gate: the management API
// and its clients, health probes, KV-event sockets, the state file, logs.
const Reserve = 1024

// Default caps used when RLIMIT_NOFILE cannot be read or is tiny.
const (
	minMaxConns          = 64
	DefaultMaxConnsPerIP = 1024
	DefaultIdleTimeout   = 60 * time.Second
	// DefaultEvictIdleAfter spares connections that have just arrived or
	// just finished a request (a client about to send).
	DefaultEvictIdleAfter = time.Second
	// DefaultMaxStreamsPerConn: 100 concurrent streams per HTTP/2
	// connection (RFC 9113's recommended minimum, nginx's default); each
	// stream is an engine request, so more buys a client nothing but a
	// larger share of the request caps.
	DefaultMaxStreamsPerConn = 100
)

// DefaultOptions derives the caps from the process's RLIMIT_NOFILE (which
// the Go runtime has already raised to the hard limit): see MaxConnsFor.
func DefaultOptions() Options {
	var lim syscall.Rlimit
	nofile := uint64(0)
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil {
		nofile = lim.Cur
	}
	max := MaxConnsFor(nofile)
	return Options{
		MaxConns:       max,
		MaxConnsPerIP:  min(DefaultMaxConnsPerIP, max),
		IdleTimeout:    DefaultIdleTimeout,
		EvictIdleAfter: DefaultEvictIdleAfter,
		// MaxRequests and MaxRequestsPerIP: 0, derived from the connection
		// caps when the gate is built (so a --max-client-conns flag moves
		// them too).
		MaxStreamsPerConn: DefaultMaxStreamsPerConn,
	}
}

// MaxConnsFor is the default global cap for a descriptor limit: the limit
// minus Reserve, halved, because every client connection that is being
// served holds one upstream connection too (Envoy's guidance: below half the
// fd limit). Never below 64.
func MaxConnsFor(nofile uint64) int {
	const ceiling = 1 << 30
	if nofile > ceiling {
		nofile = ceiling
	}
	if nofile <= Reserve+2*minMaxConns {
		return minMaxConns
	}
	return int(nofile-Reserve) / 2
}

// requestCaps resolves MaxRequests and MaxRequestsPerIP: 0 follows the
// matching connection cap, negative is no cap (returned as 0).
func (o Options) requestCaps() (global, perIP int) {
	derive := func(v, conns int) int {
		switch {
		case v < 0:
			return 0
		case v == 0:
			return max(conns, 0)
		}
		return v
	}
	return derive(o.MaxRequests, o.MaxConns), derive(o.MaxRequestsPerIP, o.MaxConnsPerIP)
}
