package tlsmat

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/infergate/infergate/admission"
)

// Why a handshake rate per source: a full TLS handshake costs the server
// about 0.7 ms of CPU (ECDSA P-256; RSA 2048 several times more), so about
// 1,400 handshakes a second fill a core, and one client opening
// connections in a loop can take the VIPs' CPU from everyone without ever
// sending a request. The connection caps bound how many connections are
// open, not how fast they are opened. Each source address therefore has a
// token bucket of handshakes: over it, the handshake is refused right after
// the ClientHello (before any key exchange or signature), counted as
// infergate_tls_handshakes_total{result="rate_limited"}.

// handshakeSources bounds how many sources' buckets are kept; the least
// recently seen are forgotten first (a forgotten source starts full).
const handshakeSources = 65536

// errHandshakeRateLimited fails a handshake over its source's rate.
var errHandshakeRateLimited = errors.New("tls: handshake rate from this address exceeded")

// HandshakeLimiter is a token bucket of TLS handshakes per client source
// (an IPv4 address, an IPv6 /64), shared by every listener of a runtime.
// Safe for concurrent use; nil allows everything.
type HandshakeLimiter struct {
	rate, burst float64
	now         func() time.Time
	buckets     *lru.Cache[netip.Prefix, *handshakeBucket]
}

type handshakeBucket struct {
	mu     sync.Mutex
	tokens float64
	last   time.Time
}

// NewHandshakeLimiter allows perSec handshakes a second per source with
// bursts of burst (burst < 1: perSec, at least 1). perSec ≤ 0: no limit
// (nil).
func NewHandshakeLimiter(perSec float64, burst int) *HandshakeLimiter {
	if perSec <= 0 {
		return nil
	}
	b := float64(burst)
	if b < 1 {
		b = max(perSec, 1)
	}
	c, _ := lru.New[netip.Prefix, *handshakeBucket](handshakeSources) // size > 0: cannot fail
	return &HandshakeLimiter{rate: perSec, burst: b, now: time.Now, buckets: c}
}

// Allow spends one handshake of addr's source; false when it has none left.
// Addresses that are not IP (unix sockets, tests) are not limited.
func (l *HandshakeLimiter) Allow(addr net.Addr) bool {
	if l == nil {
		return true
	}
	src, ok := handshakeSource(addr)
	if !ok {
		return true
	}
	now := l.now()
	b, found := l.buckets.Get(src)
	if !found {
		b = &handshakeBucket{tokens: l.burst, last: now}
		if prev, had, _ := l.buckets.PeekOrAdd(src, b); had {
			b = prev
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if el := now.Sub(b.last).Seconds(); el > 0 {
		b.tokens = min(l.burst, b.tokens+el*l.rate)
		b.last = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// handshakeSource is the bucket key of a client address.
func handshakeSource(addr net.Addr) (netip.Prefix, bool) {
	return admission.Source(admission.AddrIP(addr))
}
