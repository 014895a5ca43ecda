package kvfake

import (
	"sync"
	"time"
)

// Clock is a settable clock for tests of the KV-event index (it satisfies
// kvexact.Clock): time moves only when the test calls Advance, so staleness
// and TTL rules can be checked without sleeping. Safe for concurrent use, as
// the index reads it from the subscriber's goroutine.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a Clock reading t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's current time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
