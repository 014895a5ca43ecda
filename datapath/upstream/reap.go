package upstream

import "time"

// Idle connections are bounded per endpoint (maxIdle), but endpoints come
// and go: without reaping, every engine a rule ever named keeps its pool,
// holding sockets (and the engine's) long after the rule is gone. Two
// mechanisms bound them: CloseEndpoint when an endpoint leaves every rule,
// and ReapIdle, which closes connections idle longer than a timeout.

// CloseEndpoint closes the idle connections to addr (every TLS identity);
// exchanges in flight finish on their own connections and are pooled again
// only if the endpoint is used again.
func (c *Client) CloseEndpoint(addr string) {
	c.mu.Lock()
	var gone []*conn
	if ep := c.eps[addr]; ep != nil {
		gone = ep.idle
		ep.idle = nil
	}
	c.mu.Unlock()
	for _, pc := range gone {
		c.discard(pc) // frees the slot and wakes a waiter
	}
}

// ReapIdle starts closing connections that stayed idle longer than after
// (≤ 0: never), checking every after/2, until CloseIdle (which ends the
// goroutine at once: a tick is minutes with the defaults).
//
// Why ticks, not times: a connection pooled records the count of ticks so
// far (Client.idleTick) instead of reading the clock, once per request.
// Ticks come every P = after/2; one pooled between ticks k and k+1 is
// closed at tick k+reapTicks, having idled between (reapTicks-1)·P =
// after and reapTicks·P = 1.5·after: the bounds of closing it at the
// first tick at least after past the moment it was pooled. A late tick
// only closes later.
func (c *Client) ReapIdle(after time.Duration) {
	if after <= 0 {
		return
	}
	c.mu.Lock()
	if c.closed || c.reapStop != nil {
		c.mu.Unlock()
		return
	}
	stop := make(chan struct{})
	c.reapStop = stop
	c.mu.Unlock()
	go func() {
		t := time.NewTicker(after / 2)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if !c.reap() {
					return
				}
			}
		}
	}()
}

// reapTicks is how many ticks of ReapIdle after its pooling a connection
// still idle is closed at (ReapIdle).
const reapTicks = 3

// reap counts one tick of ReapIdle and closes the connections pooled
// reapTicks ticks before or earlier; it reports false once the client is
// closed.
func (c *Client) reap() bool {
	var gone []*conn
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return false
	}
	c.idleTick++
	for _, ep := range c.eps {
		// Idle lists are stacks: the oldest idle connections are first.
		n := 0
		for n < len(ep.idle) && c.idleTick-ep.idle[n].idleTick >= reapTicks {
			n++
		}
		if n == 0 {
			continue
		}
		gone = append(gone, ep.idle[:n]...)
		rest := append([]*conn(nil), ep.idle[n:]...)
		ep.idle = rest
	}
	c.mu.Unlock()
	for _, pc := range gone {
		c.discard(pc)
	}
	return true
}

// idleCount is how many connections are pooled (tests).
func (c *Client) idleCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, ep := range c.eps {
		n += len(ep.idle)
	}
	return n
}
