package datapath

import (
	"net/netip"
	"time"

	"github.com/infergate/infergate/accesslog"
	"github.com/infergate/infergate/admission"
	"github.com/infergate/infergate/datapath/flow"
	"github.com/infergate/infergate/datapath/kvplane"
	"github.com/infergate/infergate/datapath/ladder"
	"github.com/infergate/infergate/datapath/pd"
	"github.com/infergate/infergate/datapath/pd/bufpool"
	"github.com/infergate/infergate/datapath/reqbody"
	"github.com/infergate/infergate/datapath/upstream"
	"github.com/infergate/infergate/enginestats"
	"github.com/infergate/infergate/radix"
	"github.com/infergate/infergate/tlsmat"
	"github.com/infergate/infergate/tracing"
)

// Options tune the datapath. Build them with DefaultOptions and override.
// The sub-packages' options are embedded whole, so each knob keeps the one
// default its package gives it; the daemon embeds this struct in turn and
// the serve flags (and their yaml names) bind straight into it.
type Options struct {
	// BindAnyVIP serves a rule whose VIP is not a local address on
	// 0.0.0.0:port instead of failing Install (for VIPs delivered by an
	// external load balancer or DNAT). Rules of different VIPs that fall back
	// to the same wildcard port share that listener and are told apart by
	// host / path / model only.
	BindAnyVIP bool `yaml:"bind-any-vip"`

	MaxBodyBytes int64 `yaml:"max-body-bytes"` // request bodies read for routing above this get 413
	// MaxStreamedBodyBytes caps bodies that stream through unread (uploads,
	// pass-through paths); over it → 413.
	MaxStreamedBodyBytes int64 `yaml:"max-streamed-body-bytes"`
	// StreamedBodyTimeout bounds the whole delivery of a streamed body
	// (BodyReadTimeout is then the silence allowed between chunks), so a
	// trickling client cannot hold an engine connection forever.
	StreamedBodyTimeout time.Duration `yaml:"streamed-body-timeout"`

	// Circuit breaker (LoxiLB semantics, see breaker.go).
	BreakerConnectFailures   int `yaml:"breaker-connect-failures"`    // consecutive dial failures that open it
	BreakerPDConnectFailures int `yaml:"breaker-pd-connect-failures"` // the same on P/D rules
	Breaker5xxStreak         int `yaml:"breaker-5xx-streak"`          // consecutive engine 5xx that open it; 0 disables
	// BreakerPD5xxStreak is the same on P/D rules, LoxiLB's origin-error
	// threshold (default 3; 0 disables; LLB_PD_ORIGIN_ERR_THRESHOLD sets
	// it in cli serve).
	BreakerPD5xxStreak int           `yaml:"breaker-pd-5xx-streak"`
	BreakerOpenFor     time.Duration `yaml:"breaker-open-for"` // open window before the half-open trial

	// Health probes.
	ProbeInterval time.Duration `yaml:"-"` // time between probe rounds of a rule
	ProbeRise     int           `yaml:"-"` // consecutive successes that bring a down endpoint back

	// Engine silence (timeouts.go). FirstByteTimeout bounds the wait for a
	// single-pool engine's response headers (a hung engine → 504
	// upstream_timeout); BodyStallTimeout bounds silence inside a non-SSE
	// response body (single pool and P/D decode); StreamIdleTimeout (in
	// pd.Timeouts) inside an SSE stream. A rule's inactiveTimeOut keeps
	// LoxiLB's meaning — the connection idle timeout, 240 s by default — and
	// only caps these: no engine connection is left silent longer than it.
	DialTimeout       time.Duration `yaml:"-"`
	FirstByteTimeout  time.Duration `yaml:"first-byte-timeout"`
	BodyStallTimeout  time.Duration `yaml:"body-stall-timeout"`
	MaxStreamDuration time.Duration `yaml:"-"` // cap for rules without max_stream_duration

	// Client side of the listeners.
	ReadHeaderTimeout time.Duration `yaml:"-"`
	BodyReadTimeout   time.Duration `yaml:"-"` // a client must deliver its whole body within this

	DrainGrace time.Duration `yaml:"drain-grace"` // how long delete/Close wait for in-flight requests

	MaxIdleConnsPerHost int `yaml:"-"` // upstream keep-alive pool per endpoint
	// Upstream bounds the engine connections per endpoint (requests over
	// the cap wait for a free one instead of dialing).
	Upstream upstream.Options `yaml:",inline"`
	// UpstreamIdleTimeout closes a pooled engine connection idle this long
	// (≤ 0: never), so endpoints that come and go do not keep sockets.
	UpstreamIdleTimeout time.Duration `yaml:"upstream-idle-timeout"`

	// Timeouts are the P/D legs' bounds (PrefillTimeout,
	// DecodeFirstByteTimeout) and the SSE silence bound, owned by pd.
	pd.Timeouts `yaml:",inline"`
	// MaxSessions caps each P/D rule's Tier 0 session table.
	MaxSessions int `yaml:"-"`
	// PrefixIndex configures the Tier 1 radix index of each cache-aware P/D
	// rule (one index per rule, BudgetBytes each).
	PrefixIndex radix.Options `yaml:",inline"`
	// KV configures KV-exact routing (kvExactMode 1 and 3).
	KV kvplane.Options `yaml:",inline"`

	// Tenant controls. Keys admits requests on rules that enforce API keys
	// (nil: such rules answer 503 api_keys_unavailable). SSEModeEnforcesKeys
	// is LoxiLB's behaviour: an sse_mode rule without api_key_auth enforces
	// keys.
	Keys                KeyAdmitter `yaml:"-"`
	SSEModeEnforcesKeys bool        `yaml:"sse-mode-enforces-keys"`
	// Admission caps client connections (global, per IP; the per-VIP cap
	// is the rules' connectionLimit) and bounds keep-alive idle time.
	Admission admission.Options `yaml:",inline"`
	// Bodies bounds the memory of request bodies in flight.
	Bodies reqbody.Options `yaml:",inline"`
	// PDBuffers bounds the prompt-sized buffers (P/D leg bodies, prompt
	// keys) the process keeps between requests, all rules together.
	PDBuffers bufpool.Options `yaml:",inline"`
	// AllowUnspecifiedVIP lets a rule's externalIP be 0.0.0.0 or :: (listen
	// on every interface); without it such rules are refused at Install.
	AllowUnspecifiedVIP bool `yaml:"allow-unspecified-vip"`
	// ReplicaConsistent makes P/D choices agree across gateway replicas
	// (rendezvous hashing of the session key or prompt head; ladder/hrw.go).
	// The daemon turns it on with a shared (etcd) rule store.
	ReplicaConsistent bool `yaml:"-"`
	// TLS configures the certificate store of HTTPS VIPs.
	TLS tlsmat.Options `yaml:",inline"`
	// Engine configures the scraping of the engines' own metrics (queue,
	// running batch, KV usage) for every rule's endpoints.
	Engine enginestats.Options `yaml:",inline"`
	// GatewayAddrs are the gateway's own addresses besides its VIPs (the
	// daemon sets its management API's): an endpoint equal to one is
	// refused at Install (400 endpoint_is_gateway), as is one equal to a
	// served VIP:port.
	GatewayAddrs []netip.AddrPort `yaml:"-"`
	// TrustForwardedFor keeps a client's X-Forwarded-For and appends the
	// client to it (the gateway sits behind a proxy that sets it). Off, the
	// engine is told only the address the gateway saw: a client cannot
	// make its requests look like another's in engine logs and limits.
	TrustForwardedFor bool `yaml:"trust-forwarded-for"`
	// AccessLog writes one line per request (accesslog).
	AccessLog accesslog.Options `yaml:",inline"`
	// HTTPFrontEnd is the HTTP server of plaintext listeners: "lean"
	// (datapath/h1) or "net/http" (frontend.go); TLS listeners always run
	// net/http.
	HTTPFrontEnd string `yaml:"http-frontend"`
	// Tracing exports OpenTelemetry traces over OTLP (off by default).
	Tracing tracing.Options `yaml:",inline"`
	// Flow bounds each rule's gateway queue (rules with an
	// admission_window) and says how requests are classed.
	Flow flow.Options `yaml:",inline"`
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
		BreakerPD5xxStreak:       3,
		BreakerOpenFor:           30 * time.Second,
		ProbeInterval:            2 * time.Second,
		ProbeRise:                2,
		DialTimeout:              3 * time.Second,
		FirstByteTimeout:         60 * time.Second,
		MaxStreamDuration:        24 * time.Hour,
		BodyStallTimeout:         20 * time.Second,
		ReadHeaderTimeout:        10 * time.Second,
		BodyReadTimeout:          60 * time.Second,
		DrainGrace:               30 * time.Second,
		MaxIdleConnsPerHost:      1024,
		Upstream:                 upstream.DefaultOptions(),
		UpstreamIdleTimeout:      90 * time.Second,
		Timeouts:                 pd.DefaultTimeouts(),
		MaxSessions:              ladder.DefaultMaxSessions,
		PrefixIndex:              radix.DefaultOptions(),
		KV:                       kvplane.DefaultOptions(),
		Admission:                admission.DefaultOptions(),
		Bodies:                   reqbody.DefaultOptions(),
		PDBuffers:                bufpool.DefaultOptions(),
		TLS:                      tlsmat.DefaultOptions(),
		Engine:                   enginestats.DefaultOptions(),
		AccessLog:                accesslog.DefaultOptions(),
		HTTPFrontEnd:             DefaultFrontEnd,
		Tracing:                  tracing.DefaultOptions(),
		Flow:                     flow.DefaultOptions(),
	}
}

// withDefaults replaces each size, count or duration that has no "off"
// meaning and is not positive with its default, so a 0 from a flag or a
// config file keeps the default instead of refusing every body or timing
// out at once. Knobs where 0 means "off" (Breaker5xxStreak, BreakerPD5xxStreak, the admission
// caps, the in-flight body budget) are taken as given.
func (o Options) withDefaults() Options {
	d := DefaultOptions()
	orDefault(&o.MaxBodyBytes, d.MaxBodyBytes)
	orDefault(&o.MaxStreamedBodyBytes, d.MaxStreamedBodyBytes)
	orDefault(&o.StreamedBodyTimeout, d.StreamedBodyTimeout)
	orDefault(&o.BreakerConnectFailures, d.BreakerConnectFailures)
	orDefault(&o.BreakerPDConnectFailures, d.BreakerPDConnectFailures)
	orDefault(&o.BreakerOpenFor, d.BreakerOpenFor)
	orDefault(&o.DrainGrace, d.DrainGrace)
	orDefault(&o.PrefillTimeout, d.PrefillTimeout)
	orDefault(&o.DecodeFirstByteTimeout, d.DecodeFirstByteTimeout)
	orDefault(&o.FirstByteTimeout, d.FirstByteTimeout)
	orDefault(&o.BodyStallTimeout, d.BodyStallTimeout)
	orDefault(&o.StreamIdleTimeout, d.StreamIdleTimeout)
	orDefault(&o.PrefixIndex.BudgetBytes, d.PrefixIndex.BudgetBytes)
	orDefault(&o.PrefixIndex.MaxKeyBytes, d.PrefixIndex.MaxKeyBytes)
	return o
}

func orDefault[T int | int64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}
