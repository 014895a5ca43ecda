package tenant

import (
	"net/netip"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/infergate/infergate/admission"
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

// failureSource is the key failures from ip are counted under (the client
// source of admission.Source): the address itself for IPv4 (and
// IPv4-mapped IPv6), its /64 for IPv6, ip unchanged when it does not parse.
func failureSource(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ip
	}
	p, ok := admission.Source(a)
	switch {
	case !ok:
		return ip
	case p.Addr().Is4():
		return p.Addr().String()
	}
	return p.String()
}
