// Package daemon wires the rule store, the datapath and the management API
// into the running gateway (`infergate serve`).
package daemon

import (
	"net"
	"time"

	"github.com/infergate/infergate/admission"
	"github.com/infergate/infergate/api/auth"
	"github.com/infergate/infergate/datapath"
	"github.com/infergate/infergate/datapath/kvplane"
	"github.com/infergate/infergate/datapath/reqbody"
	"github.com/infergate/infergate/kvexact"
	"github.com/infergate/infergate/radix"
	"github.com/infergate/infergate/rules/etcdstore"
	"github.com/infergate/infergate/tenant"
	"github.com/infergate/infergate/tlsmat"
)

// Options are the daemon's command-line options. The CLI fills them from
// flags; tests build them with DefaultOptions and override fields.
type Options struct {
	APIAddr    string // management API, default 127.0.0.1:11111
	StateDir   string // persisted rule set
	RulesPath  string // YAML rule file or directory loaded at boot ("" = none)
	BindAnyVIP bool   // serve non-local VIPs on 0.0.0.0:port
	LogLevel   string

	// ShutdownTimeout bounds the graceful API shutdown on cancel.
	ShutdownTimeout time.Duration
	// APIListener, if set, is used instead of listening on APIAddr (tests
	// use it to get a free loopback port without a bind race; it also fits
	// socket activation). Run closes it.
	APIListener net.Listener

	// Datapath options (owned by the datapath; defaults from LoxiLB).
	MaxBodyBytes             int64         // 32 MiB → 413 above
	BreakerConnectFailures   int           // 5 (3 on P/D rules)
	BreakerPDConnectFailures int           // 3
	Breaker5xxStreak         int           // origin 5xx streak that trips, 0 disables
	BreakerOpenFor           time.Duration // 30 s
	DrainGrace               time.Duration // delete/update drain window
	PrefillTimeout           time.Duration // 30 s
	DecodeFirstByteTimeout   time.Duration
	// --- issue 14: streamed (unread) request bodies ---
	MaxStreamedBodyBytes int64         // 4 GiB → 413 above
	StreamedBodyTimeout  time.Duration // 15 min for a streamed body's whole delivery

	// KV-exact routing (Tier 1.5) options, see KVPlaneOptions.
	KVBindAddr         string        // "" dial engines; else bind one SUB socket here (engines connect)
	KVReplayPortOffset int           // 0 no replay; else engine replay ROUTER at kvZmqPort+offset
	KVTokenizeTimeout  time.Duration // engine /tokenize budget (50 ms)
	KVZeroHitN         int           // zero-hit watchdog streak (200)
	KVTRTPollInterval  time.Duration // TensorRT-LLM /kv_cache_events drain interval (20 ms)
	KVSingleLoadGuard  int           // kvExactMode 3 load guard (3; negative disables)
	KVStaleAfter       time.Duration // untrust an endpoint sent work this long ago with no event since (30 s; negative disables)

	// Issue 13 additions (KV-exact interop and the in-process tokenizer).
	KVBindLiveWindow time.Duration     // bind topology: "connected" = an event this recent (2 min)
	KVTokenizers     map[string]string // model → tokenizer dir or tokenizer.json ("" key: any model)

	// Tier 1 prefix affinity (pd_cache_aware_mode), see PrefixIndexOptions.
	PrefixIndexBudgetBytes int64 // per-rule prefix index budget (64 MiB)
	PrefixKeyMaxBytes      int   // prompt key cap (256 KiB): longer prompts are keyed on their head

	// --- management API access control (issue 10: only operators change rules) ---
	// Auth is owned by api/auth: token file, allowed Host names, open
	// /metrics, and the --insecure-api escape hatch.
	Auth auth.Options
	// Tenant controls: the API-key store (its StateDir is the daemon's) and
	// whether sse_mode rules without api_key_auth enforce keys (LoxiLB).
	Tenant              tenant.Options
	SSEModeEnforcesKeys bool
	// Edge hardening (issue 10), composed from the owning packages.
	Edge                admission.Options // client connection caps, keep-alive idle bound
	Bodies              reqbody.Options   // in-flight request body memory
	AllowUnspecifiedVIP bool              // accept externalIP 0.0.0.0 / ::
	// Engine silence bounds (issue 10), see datapath.Options; a rule's
	// inactiveTimeOut only caps them.
	FirstByteTimeout  time.Duration // single pool: dispatch → response headers (60 s)
	BodyStallTimeout  time.Duration // silence inside a non-SSE response body (20 s)
	StreamIdleTimeout time.Duration // silence inside an SSE stream (120 s)
	// Shared rule store (several replicas, docs/replicas.md).
	Store     string            // "" = rules.json in StateDir; etcd://h1:2379,h2:2379/prefix (etcds:// for TLS)
	Etcd      etcdstore.Options // etcd client TLS, auth and timeouts; endpoints and prefix come from Store
	ReplicaID string            // name in `get replicas` ("" = <hostname>/<API address>)
	// TLS (issue 11). The certificate store's other knobs are tlsmat's
	// defaults; these are the ones an operator sets.
	CertRoot       string // LoxiLB certificate root (<root>/<hostname>/server.crt…); "" = <state-dir>/cert
	APITLSCert     string // management API certificate (PEM); with APITLSKey the API serves HTTPS only
	APITLSKey      string
	APITLSClientCA string // with APITLSCert: require client certificates from this CA (mTLS)
}

// TLSOptions are the datapath certificate store's options: tlsmat's
// defaults with the root (default under the state directory) and the SNI
// registrations file resolved.
func (o Options) TLSOptions() tlsmat.Options {
	t := tlsmat.DefaultOptions()
	t.CertRoot = o.CertRoot
	if t.CertRoot == "" && o.StateDir != "" {
		t.CertRoot = tlsmat.DefaultCertRoot(o.StateDir)
	}
	if o.StateDir != "" {
		t.StateFile = tlsmat.SNIStateFile(o.StateDir)
	}
	return t
}

// PrefixIndexOptions are the options of each P/D rule's Tier 1 prefix index
// (radix.New); the same PrefixKeyMaxBytes caps ladder.AppendPromptKey.
func (o Options) PrefixIndexOptions() radix.Options {
	r := radix.DefaultOptions()
	if o.PrefixIndexBudgetBytes > 0 {
		r.BudgetBytes = o.PrefixIndexBudgetBytes
	}
	if o.PrefixKeyMaxBytes > 0 {
		r.MaxKeyBytes = o.PrefixKeyMaxBytes
	}
	return r
}

// KVPlaneOptions are the KV-exact plane's options from the daemon's; the
// datapath runtime builds its kvplane.Plane with them.
func (o Options) KVPlaneOptions() kvplane.Options {
	k := kvplane.DefaultOptions()
	k.BindAddr = o.KVBindAddr
	k.ReplayPortOffset = o.KVReplayPortOffset
	if o.KVTokenizeTimeout > 0 {
		k.TokenizeTimeout = o.KVTokenizeTimeout
	}
	if o.KVZeroHitN > 0 {
		k.WatchdogN = o.KVZeroHitN
	}
	if o.KVTRTPollInterval > 0 {
		k.TRTPollInterval = o.KVTRTPollInterval
	}
	k.SingleLoadGuard = o.KVSingleLoadGuard
	k.StaleAfter = o.KVStaleAfter
	k.BindLiveWindow = o.KVBindLiveWindow
	k.Tokenizers = o.KVTokenizers
	return k
}

// DefaultOptions returns the documented defaults. The datapath, KV-plane and
// prefix-index defaults are read from those packages' own DefaultOptions so
// each default lives in one place.
func DefaultOptions() Options {
	dp := datapath.DefaultOptions()
	return Options{
		APIAddr:                  "127.0.0.1:11111",
		Tenant:                   tenant.DefaultOptions(),
		StateDir:                 "/var/lib/infergate",
		LogLevel:                 "info",
		ShutdownTimeout:          10 * time.Second,
		MaxBodyBytes:             dp.MaxBodyBytes,
		BreakerConnectFailures:   dp.BreakerConnectFailures,
		BreakerPDConnectFailures: dp.BreakerPDConnectFailures,
		Breaker5xxStreak:         dp.Breaker5xxStreak,
		BreakerOpenFor:           dp.BreakerOpenFor,
		DrainGrace:               dp.DrainGrace,
		PrefillTimeout:           dp.PrefillTimeout,
		DecodeFirstByteTimeout:   dp.DecodeFirstByteTimeout,
		KVTokenizeTimeout:        dp.KV.TokenizeTimeout,
		KVZeroHitN:               dp.KV.WatchdogN,
		KVTRTPollInterval:        dp.KV.TRTPollInterval,
		KVSingleLoadGuard:        dp.KV.SingleLoadGuard,
		KVStaleAfter:             kvexact.DefaultStaleAfter, // kvplane leaves 0 = kvexact's default; the CLI shows it
		KVBindLiveWindow:         kvexact.DefaultLiveWindow,
		PrefixIndexBudgetBytes:   dp.PrefixIndex.BudgetBytes,
		PrefixKeyMaxBytes:        dp.PrefixIndex.MaxKeyBytes,
		Auth:                     auth.DefaultOptions(),
		Edge:                     dp.Admission,
		Bodies:                   dp.Bodies,
		FirstByteTimeout:         dp.FirstByteTimeout,
		BodyStallTimeout:         dp.BodyStallTimeout,
		StreamIdleTimeout:        dp.StreamIdleTimeout,

		Etcd: etcdstore.DefaultOptions(),
	}
}
