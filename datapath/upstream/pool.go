package upstream

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/infergate/infergate/datapath/sockio"
)

// Why a bounded pool: an engine connection is opened per request in
// flight, and HTTP/2 lets one client connection carry hundreds of
// requests, so without a bound the number of engine sockets follows the
// clients' stream count (20 connections × 250 streams once opened 4,062 of
// them and exhausted the gateway's descriptors). Each endpoint address
// therefore has at most Options.MaxConnsPerEndpoint connections open
// (dialing, busy or idle, every TLS identity together); a request that finds
// none free waits in FIFO order for one to be returned or closed, for as
// long as its context allows, instead of dialing.

// DefaultMaxConnsPerEndpoint is the default Options.MaxConnsPerEndpoint:
// above the concurrency an engine batches (vLLM's max_num_seqs defaults to
// 256), so the cap queues only what the engine would queue itself.
const DefaultMaxConnsPerEndpoint = 256

// Options bound the Client's engine connections.
type Options struct {
	// MaxConnsPerEndpoint caps the connections open to one engine address;
	// requests over it wait for a free one (bounded by their context). 0:
	// no cap.
	MaxConnsPerEndpoint int `yaml:"max-engine-conns-per-endpoint"`
	// RelayLoops relays SSE streams whose client is written inside the
	// front end's read wait from epoll loops, one per P (ClientSink): no
	// wake-up of the stream's goroutine per event. false: each stream's
	// goroutine waits for its engine socket itself.
	RelayLoops bool `yaml:"sse-relay-loops"`
}

// DefaultOptions returns the documented defaults.
func DefaultOptions() Options {
	return Options{MaxConnsPerEndpoint: DefaultMaxConnsPerEndpoint, RelayLoops: true}
}

// endpointConns is the connections to one engine address (Client.mu).
type endpointConns struct {
	open int             // dialing, busy or idle
	idle []*conn         // most recently returned last
	wait []chan struct{} // requests waiting for a slot or an idle connection, oldest first
}

// engineShare: a request that waited for a connection is sent only while
// at least 1/engineShare of its HeaderWait is left for the engine. Why:
// one bound covers the pool wait and the engine's silence, so a slot that
// came free just before the bound would send a request the engine could
// not answer in time; it would then fail as the engine's timeout (feeding
// its breaker), close a warm connection, and leave the engine work nobody
// waits for. Such a request gives up at the pool instead, not sent.
const engineShare = 4

// PoolWaitError is a request that gave up waiting for a connection to a
// saturated endpoint: its context ended, or (TimedOut) too little of its
// leg's HeaderWait was left to send it (see engineShare), since a request
// whose first byte is due cannot wait for a slot any longer than that.
// Nothing was sent either way.
type PoolWaitError struct {
	Endpoint string
	// TimedOut: the wait reached the leg's HeaderWait (Err is then
	// os.ErrDeadlineExceeded).
	TimedOut bool
	Err      error
}

func (e *PoolWaitError) Error() string {
	return fmt.Sprintf("waiting for a connection to %s (at its cap): %v", e.Endpoint, e.Err)
}
func (e *PoolWaitError) Unwrap() error { return e.Err }

// acquire returns an idle connection of identity id to addr, or reserves a
// slot for a new one (nil, nil: the caller dials and, on failure, calls
// release). At the cap it waits until ctx ends or, when dl is not zero,
// until the engine's share of wait before dl (engineShare); a turn that
// comes at or after that is passed on, since the timer and the turn can
// be ready together. The bound is computed only here, at the cap: a
// Time.Add (~75 instructions) per request that almost never waits.
func (c *Client) acquire(ctx context.Context, addr, id string, dl sockio.Mono, wait time.Duration) (*conn, error) {
	var deadline sockio.Mono
	var timer *time.Timer
	var expired <-chan time.Time // nil (never fires) until the first wait
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		c.mu.Lock()
		ep := c.eps[addr]
		if ep == nil {
			ep = &endpointConns{}
			c.eps[addr] = ep
		}
		if pc := ep.takeIdle(id); pc != nil {
			c.mu.Unlock()
			return pc, nil
		}
		if c.maxConns <= 0 || ep.open < c.maxConns {
			ep.open++
			c.mu.Unlock()
			return nil, nil
		}
		if len(ep.idle) > 0 {
			// An idle connection of another TLS identity (an older rule
			// generation) holds a slot nobody can use: its slot becomes ours.
			old := ep.idle[0]
			ep.idle = ep.idle[1:]
			c.mu.Unlock()
			old.close()
			return nil, nil
		}
		if dl != sockio.NoDeadline && timer == nil {
			deadline = dl.Add(-wait / engineShare)
			timer = time.NewTimer(deadline.Sub(sockio.Now()))
			expired = timer.C
		}
		ch := make(chan struct{}, 1)
		ep.wait = append(ep.wait, ch)
		c.mu.Unlock()
		select {
		case <-ch:
			if deadline == sockio.NoDeadline || sockio.Now() < deadline {
				continue
			}
		case <-ctx.Done():
			c.giveUp(addr, ep, ch)
			return nil, &PoolWaitError{Endpoint: addr, Err: context.Cause(ctx)}
		case <-expired:
		}
		c.giveUp(addr, ep, ch)
		return nil, &PoolWaitError{Endpoint: addr, TimedOut: true, Err: os.ErrDeadlineExceeded}
	}
}

// giveUp takes a waiter that stops waiting out of the queue.
func (c *Client) giveUp(addr string, ep *endpointConns, ch chan struct{}) {
	c.mu.Lock()
	if !ep.removeWaiter(ch) {
		ep.wakeOne() // woken as the wait ended: pass the turn on
	}
	c.forget(addr, ep)
	c.mu.Unlock()
}

// release gives back a slot whose connection is closed (or was never
// opened) and wakes the next waiter.
func (c *Client) release(addr string) {
	c.mu.Lock()
	if ep := c.eps[addr]; ep != nil {
		ep.open--
		ep.wakeOne()
		c.forget(addr, ep)
	}
	c.mu.Unlock()
}

// discard closes a connection that cannot be reused and frees its slot.
func (c *Client) discard(pc *conn) {
	pc.close()
	c.release(pc.addr)
}

// close closes the connection (its slot is the caller's to free).
func (pc *conn) close() {
	pc.sock.StopWatchingPeer()
	_ = pc.sock.NetConn().Close() // sock's: a stream relayed from a loop hands it a new one
}

// forget drops an endpoint's entry once nothing refers to it, so addresses
// that come and go leave no state behind (c.mu held).
func (c *Client) forget(addr string, ep *endpointConns) {
	if ep.open <= 0 && len(ep.idle) == 0 && len(ep.wait) == 0 && c.eps[addr] == ep {
		delete(c.eps, addr)
	}
}

// OpenConns is the number of connections open to addr (dialing, busy or
// idle).
func (c *Client) OpenConns(addr string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ep := c.eps[addr]; ep != nil {
		return ep.open
	}
	return 0
}

// takeIdle pops the most recently returned idle connection of identity id.
func (ep *endpointConns) takeIdle(id string) *conn {
	for i := len(ep.idle) - 1; i >= 0; i-- {
		if pc := ep.idle[i]; pc.tlsID == id {
			ep.idle = append(ep.idle[:i], ep.idle[i+1:]...)
			return pc
		}
	}
	return nil
}

// wakeOne tells the oldest waiter to look again.
func (ep *endpointConns) wakeOne() {
	if len(ep.wait) == 0 {
		return
	}
	ch := ep.wait[0]
	ep.wait = ep.wait[1:]
	ch <- struct{}{} // buffered, sent once: never blocks
}

// removeWaiter takes ch out of the queue; false means it was already woken.
func (ep *endpointConns) removeWaiter(ch chan struct{}) bool {
	for i, w := range ep.wait {
		if w == ch {
			ep.wait = append(ep.wait[:i], ep.wait[i+1:]...)
			return true
		}
	}
	return false
}
