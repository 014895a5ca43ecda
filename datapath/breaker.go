package datapath

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/datapath/pick"
	"github.com/infergate/infergate/metrics"
)

// Breaker states (values match the infergate_datapath_breaker_state gauge).
const (
	breakerClosed   = metrics.BreakerClosed
	breakerOpen     = metrics.BreakerOpen
	breakerHalfOpen = metrics.BreakerHalfOpen
)

func breakerName(s int32) string {
	switch s {
	case breakerOpen:
		return "open"
	case breakerHalfOpen:
		return "half-open"
	}
	return "closed"
}

// breakerConfig is what a rule asks of its breakers; zero value = disabled.
type breakerConfig struct {
	enabled      bool
	connectFails int           // consecutive dial failures that open
	streak5xx    int           // consecutive engine 5xx that open; 0 disables
	openFor      time.Duration // open window before the half-open trial
}

// breaker is one endpoint's circuit breaker with LoxiLB semantics:
// consecutive dial failures (or a streak of engine 5xx) open it; after the
// open window exactly one request is let through (half-open); a response that
// is not a 5xx closes it, a failure reopens it. The state is an atomic so the
// selector reads it without locking; transitions take the mutex.
type breaker struct {
	state     atomic.Int32
	openUntil atomic.Int64 // unix nanos; valid while open
	openedBy  atomic.Int32 // openCause of the last opening; valid while open

	mu        sync.Mutex
	fails     int
	streak5xx int
}

// selectable reports whether the selector may consider the endpoint
// (pick.BreakerSelectable, the one rule). now is filled lazily so the
// common (closed) case never reads the clock.
func (b *breaker) selectable(now *int64) bool {
	return pick.BreakerSelectable(&b.state, &b.openUntil, now)
}

// admit claims the request slot after selection: always for closed, and the
// single half-open trial when the open window is over. It returns the new
// state when it changed (for metrics) or -1.
func (b *breaker) admit() (ok bool, changed int32) {
	switch b.state.Load() {
	case breakerClosed:
		return true, -1
	case breakerOpen:
		if time.Now().UnixNano() < b.openUntil.Load() {
			return false, -1
		}
		if b.state.CompareAndSwap(breakerOpen, breakerHalfOpen) {
			return true, breakerHalfOpen
		}
	}
	return false, -1
}

// openCause is the evidence that opened a breaker.
type openCause int32

const (
	openedByConnect openCause = iota // consecutive connect failures
	openedBy5xx                      // a streak of engine 5xx (or deaths, timeouts)
)

// openLocked moves to open; the caller holds mu.
func (b *breaker) openLocked(cfg *breakerConfig, now time.Time, cause openCause) int32 {
	b.openedBy.Store(int32(cause))
	b.openUntil.Store(now.Add(cfg.openFor).UnixNano())
	b.state.Store(breakerOpen)
	b.fails = 0
	b.streak5xx = 0
	return breakerOpen
}

// onDialFailure records a connect failure and returns the new state or -1.
func (b *breaker) onDialFailure(cfg *breakerConfig) int32 {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state.Load() {
	case breakerHalfOpen:
		return b.openLocked(cfg, time.Now(), openedByConnect)
	case breakerClosed:
		b.fails++
		if cfg.connectFails > 0 && b.fails >= cfg.connectFails {
			return b.openLocked(cfg, time.Now(), openedByConnect)
		}
	}
	return -1
}

// onResponse records that the engine answered with status: the connect
// succeeded (resets the failure count), and the status feeds the 5xx streak
// (5xx increments, below 400 resets, 4xx is neutral).
func (b *breaker) onResponse(cfg *breakerConfig, status int) int32 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fails = 0
	is5xx := status >= 500
	switch {
	case is5xx:
		b.streak5xx++
	case status < 400:
		b.streak5xx = 0
	}
	switch b.state.Load() {
	case breakerHalfOpen:
		if is5xx {
			return b.openLocked(cfg, time.Now(), openedBy5xx)
		}
		b.streak5xx = 0
		b.state.Store(breakerClosed)
		return breakerClosed
	case breakerClosed:
		if is5xx && cfg.streak5xx > 0 && b.streak5xx >= cfg.streak5xx {
			return b.openLocked(cfg, time.Now(), openedBy5xx)
		}
	}
	return -1
}

// onAbandon ends a half-open trial that produced no verdict (client gone,
// connection broke after sending): the breaker reopens. When retryNow is
// true the open window is already over, so the next request is the trial.
func (b *breaker) onAbandon(cfg *breakerConfig, retryNow bool) int32 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state.Load() != breakerHalfOpen {
		return -1
	}
	now := time.Now()
	s := b.openLocked(cfg, now, openCause(b.openedBy.Load()))
	if retryNow {
		b.openUntil.Store(now.UnixNano())
	}
	return s
}

// probeEndsOpenWindow is the rule for a passing health probe of an endpoint
// whose breaker is open: the open window ends at once (the next request is
// the half-open trial) when the probe contradicts the evidence that opened
// it. Connect failures are contradicted by any passing probe, which itself
// connected; a 5xx streak only by the endpoint coming back from down (a
// restart), since an engine can pass its health check and still fail
// requests — that case waits out the window.
func probeEndsOpenWindow(cause openCause, cameBack bool) bool {
	return cause == openedByConnect || cameBack
}

// onProbePass applies probeEndsOpenWindow. cameBack: this probe moved the
// endpoint from down (or probing) to active. It reports whether the window
// was cut short. The state stays open: admit still claims the one trial.
func (b *breaker) onProbePass(cameBack bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state.Load() != breakerOpen || !probeEndsOpenWindow(openCause(b.openedBy.Load()), cameBack) {
		return false
	}
	now := time.Now().UnixNano()
	if b.openUntil.Load() <= now {
		return false
	}
	b.openUntil.Store(now)
	return true
}
