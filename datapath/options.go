package datapath

import (
	"time"

	"github.com/infergate/infergate/datapath/kvplane"
	"github.com/infergate/infergate/datapath/ladder"
	"github.com/infergate/infergate/radix"
	"github.com/infergate/infergate/tlsmat"
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

	// Timeouts. A rule's IdleTimeout bounds silence from a non-streaming
	// engine; the options below cover what a rule does not say.
	DialTimeout       time.Duration
	FirstByteTimeout  time.Duration // lower bound on the wait for response headers
	StreamIdleTimeout time.Duration // silence allowed inside an SSE stream
	MaxStreamDuration time.Duration // cap for rules without max_stream_duration
	DefaultIdle       time.Duration // used when a rule's IdleTimeout is 0

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

	// TLS configures the certificate store of HTTPS VIPs (issue 11).
	TLS tlsmat.Options
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
		DefaultIdle:              20 * time.Second,
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
		TLS:                      tlsmat.DefaultOptions(),
	}
}
