// Package daemon wires the rule store, the datapath and the management API
// into the running gateway (`infergate serve`).
package daemon

import (
	"net"
	"time"

	"github.com/infergate/infergate/datapath"
	"github.com/infergate/infergate/datapath/kvplane"
	"github.com/infergate/infergate/kvexact"
	"github.com/infergate/infergate/radix"
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

	// KV-exact routing (Tier 1.5) options, see KVPlaneOptions.
	KVBindAddr         string        // "" dial engines; else bind one SUB socket here (engines connect)
	KVReplayPortOffset int           // 0 no replay; else engine replay ROUTER at kvZmqPort+offset
	KVTokenizeTimeout  time.Duration // engine /tokenize budget (50 ms)
	KVZeroHitN         int           // zero-hit watchdog streak (200)
	KVTRTPollInterval  time.Duration // TensorRT-LLM /kv_cache_events drain interval (20 ms)
	KVSingleLoadGuard  int           // kvExactMode 3 load guard (3; negative disables)
	KVStaleAfter       time.Duration // untrust an endpoint sent work this long ago with no event since (30 s; negative disables)

	// Tier 1 prefix affinity (pd_cache_aware_mode), see PrefixIndexOptions.
	PrefixIndexBudgetBytes int64 // per-rule prefix index budget (64 MiB)
	PrefixKeyMaxBytes      int   // prompt key cap (256 KiB): longer prompts are keyed on their head

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
	return k
}

// DefaultOptions returns the documented defaults. The datapath, KV-plane and
// prefix-index defaults are read from those packages' own DefaultOptions so
// each default lives in one place.
func DefaultOptions() Options {
	dp := datapath.DefaultOptions()
	return Options{
		APIAddr:                  "127.0.0.1:11111",
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
		PrefixIndexBudgetBytes:   dp.PrefixIndex.BudgetBytes,
		PrefixKeyMaxBytes:        dp.PrefixIndex.MaxKeyBytes,
	}
}
