package datapath

import (
	"time"

	"github.com/infergate/infergate/datapath/kvplane"
	"github.com/infergate/infergate/datapath/ladder"
	"github.com/infergate/infergate/radix"
)

// Options tune the datapath. Build them with DefaultOptions and override.
type Options struct {
	// BindAnyVIP serves a rule whose VIP is not a local address on
	// 0.0.0.0:port instead of failing Install (for VIPs delivered by an
	// external load balancer or DNAT). Rules of different VIPs that fall back
	// to the same wildcard port share that listener and are told apart by
	// host / path / model only.
	BindAnyVIP bool

	MaxBodyBytes int64 // request bodies above this get 413

	// Circuit breaker (LoxiLB semantics, see breaker.go).
	BreakerConnectFailures   int           // consecutive dial failures that open it
	BreakerPDConnectFailures int           // the same on P/D rules
	Breaker5xxStreak         int           // consecutive engine 5xx that open it; 0 disables
	BreakerOpenFor           time.Duration // open window before the half-open trial

	// Health probes.
	ProbeInterval time.Duration // time between probe rounds of a rule
	ProbeRise     int           // consecutive successes that bring a down endpoint back

	// Engine silence (timeouts.go). FirstByteTimeout bounds the wait for a
	// single-pool engine's response headers (a hung engine → 504
	// upstream_timeout); BodyStallTimeout bounds silence inside a non-SSE
	// response body (single pool and P/D decode); StreamIdleTimeout inside
	// an SSE stream. A rule's inactiveTimeOut keeps LoxiLB's meaning — the
	// connection idle timeout, 240 s by default — and only caps these: no
	// engine connection is left silent longer than it.
	DialTimeout       time.Duration
	FirstByteTimeout  time.Duration
	BodyStallTimeout  time.Duration
	StreamIdleTimeout time.Duration
	MaxStreamDuration time.Duration // cap for rules without max_stream_duration

	// Client side of the listeners.
	ReadHeaderTimeout time.Duration
	BodyReadTimeout   time.Duration // a client must deliver its whole body within this
	ClientIdleTimeout time.Duration // keep-alive idle time of client connections

	DrainGrace time.Duration // how long delete/Close wait for in-flight requests

	MaxIdleConnsPerHost int // upstream keep-alive pool per endpoint

	// P/D rules (datapath/pd). PrefillTimeout bounds the prefill leg (504
	// pd_prefill_timeout); DecodeFirstByteTimeout bounds decode dispatch to
	// its first byte (504 pd_decode_timeout).
	PrefillTimeout         time.Duration
	DecodeFirstByteTimeout time.Duration
	// MaxSessions caps each P/D rule's Tier 0 session table.
	MaxSessions int
	// PrefixIndex configures the Tier 1 radix index of each cache-aware P/D
	// rule (one index per rule, BudgetBytes each).
	PrefixIndex radix.Options
	// KV configures KV-exact routing (kvExactMode 1 and 3).
	KV kvplane.Options
}

// DefaultOptions returns the documented defaults (LoxiLB's where it has one).
func DefaultOptions() Options {
	return Options{
		MaxBodyBytes:             32 << 20,
		BreakerConnectFailures:   5,
		BreakerPDConnectFailures: 3,
		Breaker5xxStreak:         5,
		BreakerOpenFor:           30 * time.Second,
		ProbeInterval:            2 * time.Second,
		ProbeRise:                2,
		DialTimeout:              3 * time.Second,
		FirstByteTimeout:         60 * time.Second,
		StreamIdleTimeout:        120 * time.Second,
		MaxStreamDuration:        24 * time.Hour,
		BodyStallTimeout:         20 * time.Second,
		ReadHeaderTimeout:        10 * time.Second,
		BodyReadTimeout:          60 * time.Second,
		ClientIdleTimeout:        90 * time.Second,
		DrainGrace:               30 * time.Second,
		MaxIdleConnsPerHost:      1024,
		PrefillTimeout:           30 * time.Second,
		DecodeFirstByteTimeout:   60 * time.Second,
		MaxSessions:              ladder.DefaultMaxSessions,
		PrefixIndex:              radix.DefaultOptions(),
		KV:                       kvplane.DefaultOptions(),
	}
}
