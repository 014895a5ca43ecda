package datapath

import (
	"time"

	"github.com/infergate/infergate/admission"
	"github.com/infergate/infergate/datapath/kvplane"
	"github.com/infergate/infergate/datapath/ladder"
	"github.com/infergate/infergate/datapath/reqbody"
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

	MaxBodyBytes int64 // request bodies read for routing above this get 413
	// MaxStreamedBodyBytes caps bodies that stream through unread (uploads,
	// pass-through paths); over it → 413. 0: no cap.
	MaxStreamedBodyBytes int64
	// StreamedBodyTimeout bounds the whole delivery of a streamed body
	// (BodyReadTimeout is then the silence allowed between chunks), so a
	// trickling client cannot hold an engine connection forever. 0: none.
	StreamedBodyTimeout time.Duration

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

	// Tenant controls. Keys admits requests on rules that enforce API keys
	// (nil: such rules answer 503 api_keys_unavailable). SSEModeEnforcesKeys
	// is LoxiLB's behaviour: an sse_mode rule without api_key_auth enforces
	// keys.
	Keys                KeyAdmitter
	SSEModeEnforcesKeys bool
	// Edge hardening (issue 10).
	// Admission caps client connections (global, per IP; the per-VIP cap
	// is the rules' connectionLimit) and bounds keep-alive idle time.
	Admission admission.Options
	// Bodies bounds the memory of request bodies in flight.
	Bodies reqbody.Options
	// AllowUnspecifiedVIP lets a rule's externalIP be 0.0.0.0 or :: (listen
	// on every interface); without it such rules are refused at Install.
	AllowUnspecifiedVIP bool
	// ReplicaConsistent makes P/D choices agree across gateway replicas
	// (rendezvous hashing of the session key or prompt head; ladder/hrw.go).
	// The daemon turns it on with a shared (etcd) rule store.
	ReplicaConsistent bool
	// TLS configures the certificate store of HTTPS VIPs (issue 11).
	TLS tlsmat.Options
}

// DefaultOptions returns the documented defaults (LoxiLB's where it has one).
func DefaultOptions() Options {
	return Options{
		MaxBodyBytes:             32 << 20,
		MaxStreamedBodyBytes:     4 << 30,
		StreamedBodyTimeout:      15 * time.Minute,
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
		DrainGrace:               30 * time.Second,
		MaxIdleConnsPerHost:      1024,
		PrefillTimeout:           30 * time.Second,
		DecodeFirstByteTimeout:   60 * time.Second,
		MaxSessions:              ladder.DefaultMaxSessions,
		PrefixIndex:              radix.DefaultOptions(),
		KV:                       kvplane.DefaultOptions(),
		Admission:                admission.DefaultOptions(),
		Bodies:                   reqbody.DefaultOptions(),
		TLS:                      tlsmat.DefaultOptions(),
	}
}
