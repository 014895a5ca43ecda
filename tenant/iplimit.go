package tenant

import (
	"net/netip"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// ipLimiterSize bounds how many client addresses' failure buckets are kept;
// the least recently failing are forgotten first.
const ipLimiterSize = 65536

// ipLimiter rate-limits failed key checks per client IP.
type ipLimiter struct {
	rate, burst float64
	cache       *lru.Cache[string, *bucket]
}

func newIPLimiter(rate, burst float64) *ipLimiter {
	c, _ := lru.New[string, *bucket](ipLimiterSize) // size > 0: cannot fail
	return &ipLimiter{rate: rate, burst: burst, cache: c}
}

// blocked reports whether ip has used up its failure budget (without
// spending any).
func (l *ipLimiter) blocked(ip string, now time.Time) (bool, time.Duration) {
	b, ok := l.cache.Get(ip)
	if !ok {
		return false, 0
	}
	ok, q := b.take(1, 0, now)
	return !ok, q.retry
}

// fail records one failed check from ip.
func (l *ipLimiter) fail(ip string, now time.Time) {
	b, ok := l.cache.Get(ip)
	if !ok {
		b = newBucket(l.rate, l.burst, now)
		l.cache.Add(ip, b)
	}
	b.take(0, 1, now)
}

// ipv6SourceBits is the prefix an IPv6 client is limited by: a /64 is what
// one subscriber is given, so a client rotating through its own /64 is
// still one source.
const ipv6SourceBits = 64

// failureSource is the key failures from ip are counted under: the address
// itself for IPv4 (and IPv4-mapped IPv6), its /64 for IPv6, ip unchanged
// when it does not parse.
func failureSource(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ip
	}
	a = a.Unmap()
	if a.Is4() {
		return a.String()
	}
	p, err := a.WithZone("").Prefix(ipv6SourceBits)
	if err != nil {
		return ip
	}
	return p.String()
}
