package tenant

import (
	"math"
	"sync"
	"time"
)

// bucket is a token bucket: capacity burst, refilled at rate per second.
// Level may go below zero when a reservation is larger than what was left;
// the debt is repaid by refill before the next admission. The zero bucket
// (rate 0) is unlimited.
type bucket struct {
	mu    sync.Mutex
	rate  float64 // per second; 0 = unlimited
	burst float64
	level float64
	last  time.Time
}

func newBucket(rate, burst float64, now time.Time) *bucket {
	return &bucket{rate: rate, burst: burst, level: burst, last: now}
}

// reconfigure changes rate and capacity (a PATCH), keeping what was spent.
func (b *bucket) reconfigure(rate, burst float64, now time.Time) {
	b.mu.Lock()
	b.refill(now)
	spent := b.burst - b.level
	b.rate, b.burst = rate, burst
	b.level = math.Min(burst, burst-spent)
	b.mu.Unlock()
}

func (b *bucket) refill(now time.Time) {
	if dt := now.Sub(b.last).Seconds(); dt > 0 {
		b.level = math.Min(b.burst, b.level+dt*b.rate)
		b.last = now
	}
}

// quota is what a bucket reports for the x-ratelimit-* headers.
type quota struct {
	limit     float64       // capacity
	remaining float64       // after this admission, ≥ 0
	reset     time.Duration // until the bucket is full again
	retry     time.Duration // on refusal: until the next admission can pass
}

// take admits when the bucket holds at least need (need ≤ burst) and then
// removes cost (≥ need; a token reservation may exceed what is left). It
// reports the quota either way.
func (b *bucket) take(need, cost float64, now time.Time) (bool, quota) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	ok := b.level >= need
	if ok {
		b.level -= cost
	}
	q := quota{limit: b.burst, remaining: math.Max(0, b.level)}
	if b.rate > 0 {
		q.reset = secs((b.burst - b.level) / b.rate)
		if !ok {
			q.retry = secs((need - b.level) / b.rate)
		}
	}
	return ok, q
}

// give returns n tokens (a reservation that turned out larger than the use;
// n < 0 charges more).
func (b *bucket) give(n float64, now time.Time) {
	b.mu.Lock()
	b.refill(now)
	b.level = math.Min(b.burst, b.level+n)
	b.mu.Unlock()
}

func secs(s float64) time.Duration {
	if s <= 0 {
		return 0
	}
	return time.Duration(math.Ceil(s * float64(time.Second)))
}

// limits are one identity's (a key's or a tenant's) buckets. A nil bucket
// is no limit on that dimension.
type limits struct {
	requests *bucket // rate_limit_rps / burst_size
	tokens   *bucket // tokens_per_min, refilled per second
}

// withLimits returns the buckets for new ceilings, reusing prev's buckets
// (and what was spent on them) on the dimensions that stay limited. The
// result is a new value: published limits are never mutated, so the request
// path reads their bucket pointers without a lock.
//
// share ≥ 1 divides every ceiling: with N replicas behind an even spread
// each enforces 1/N of the limit (Registry.SetShare). A bucket never holds
// less than one request or token, so a tiny share still admits.
func withLimits(prev *limits, rps, burst, tpm int, share int, now time.Time) *limits {
	var old limits
	if prev != nil {
		old = *prev
	}
	n := float64(max(share, 1))
	return &limits{
		requests: resize(old.requests, float64(rps)/n, math.Max(1, float64(burst)/n), now),
		tokens:   resize(old.tokens, float64(tpm)/60/n, math.Max(1, float64(tpm)/n), now),
	}
}

func resize(b *bucket, rate, burst float64, now time.Time) *bucket {
	switch {
	case rate <= 0:
		return nil
	case b == nil:
		return newBucket(rate, burst, now)
	default:
		b.reconfigure(rate, burst, now)
		return b
	}
}
