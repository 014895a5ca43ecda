package upstream

import (
	"strings"
	"time"
)

// Idle connections are bounded per endpoint (maxIdle), but endpoints come
// and go: without reaping, every engine a rule ever named keeps its pool,
// holding sockets (and the engine's) long after the rule is gone. Two
// mechanisms bound them: CloseEndpoint when an endpoint leaves every rule,
// and ReapIdle, which closes connections idle longer than a timeout.

// CloseEndpoint closes the idle connections to addr (every TLS
// configuration's pool) and forgets its pools; exchanges in flight finish
// on their own connections and are pooled again only if the endpoint is
// used again.
func (c *Client) CloseEndpoint(addr string) {
	var gone []*conn
	c.mu.Lock()
	for key, list := range c.idle {
		if key == addr || strings.HasPrefix(key, addr+"|") {
			gone = append(gone, list...)
			delete(c.idle, key)
		}
	}
	c.mu.Unlock()
	for _, pc := range gone {
		_ = pc.nc.Close()
	}
}

// ReapIdle starts closing connections that stayed idle longer than after
// (≤ 0: never), checking every after/2, until CloseIdle.
func (c *Client) ReapIdle(after time.Duration) {
	if after <= 0 {
		return
	}
	go func() {
		t := time.NewTicker(after / 2)
		defer t.Stop()
		for now := range t.C {
			if !c.reap(now.Add(-after)) {
				return
			}
		}
	}()
}

// reap closes the connections idle since before cutoff and drops emptied
// pools; it reports false once the client is closed.
func (c *Client) reap(cutoff time.Time) bool {
	var gone []*conn
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return false
	}
	for key, list := range c.idle {
		// Pools are stacks: the oldest idle connections are first.
		n := 0
		for n < len(list) && list[n].idleSince.Before(cutoff) {
			n++
		}
		if n == 0 {
			continue
		}
		gone = append(gone, list[:n]...)
		if n == len(list) {
			delete(c.idle, key)
			continue
		}
		c.idle[key] = append(list[:0], list[n:]...)
		clear(list[len(list)-n:])
	}
	c.mu.Unlock()
	for _, pc := range gone {
		_ = pc.nc.Close()
	}
	return true
}

// idleCount is how many connections are pooled (tests).
func (c *Client) idleCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, l := range c.idle {
		n += len(l)
	}
	return n
}
