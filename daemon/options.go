// Package daemon wires the rule store, the datapath and the management API
// into the running gateway (`infergate serve`).
package daemon

import (
	"net"
	"time"

	"github.com/infergate/infergate/api/auth"
	"github.com/infergate/infergate/datapath"
	"github.com/infergate/infergate/epp"
	"github.com/infergate/infergate/gcfloor"
	"github.com/infergate/infergate/rules/store"
	"github.com/infergate/infergate/rules/store/etcdstore"
	"github.com/infergate/infergate/tenant"
	"github.com/infergate/infergate/tlsmat"
)

// Options are the daemon's options: its own (API, state, store) composed
// with each package's option struct, which owns its knobs and their one
// default. The serve flags bind straight into the fields; each field's yaml
// name is its flag's, for a config file to map onto the same struct. Tests
// build them with DefaultOptions and override fields.
type Options struct {
	APIAddr   string `yaml:"api-addr"`  // management API, default 127.0.0.1:11111
	StateDir  string `yaml:"state-dir"` // persisted rule set, API keys, SNI registrations
	RulesPath string `yaml:"rules"`     // YAML rule file or directory loaded at boot ("" = none)
	LogLevel  string `yaml:"log-level"`
	LogFormat string `yaml:"log-format"` // text or json (one JSON object per line, for log shippers)

	// ShutdownTimeout bounds the graceful API shutdown on cancel.
	ShutdownTimeout time.Duration `yaml:"shutdown-timeout"`
	// APIListener, if set, is used instead of listening on APIAddr (tests
	// use it to get a free loopback port without a bind race; it also fits
	// socket activation). Run closes it.
	APIListener net.Listener `yaml:"-"`

	// Options are the datapath's, with the KV plane, prefix index, edge
	// admission, body budget and certificate store inside. Run fills what
	// follows from the daemon's own choices: Keys (the tenant registry),
	// ReplicaConsistent (a shared store) and the TLS state file and
	// default certificate root (under StateDir).
	datapath.Options `yaml:",inline"`

	// Auth is who may use the management API: token file, allowed Host
	// names, open /metrics, and the --insecure-api escape hatch.
	Auth auth.Options `yaml:",inline"`
	// Tenant is the API-key store (its StateDir is the daemon's).
	Tenant tenant.Options `yaml:",inline"`

	// Shared rule store (several replicas, docs/replicas.md).
	Store     string            `yaml:"store"`      // "" = rules.json in StateDir; etcd://h1:2379,h2:2379/prefix (etcds:// for TLS)
	Etcd      etcdstore.Options `yaml:",inline"`    // etcd client TLS, auth and timeouts; endpoints and prefix come from Store
	ReplicaID string            `yaml:"replica-id"` // name in `get replicas` ("" = <hostname>/<API address>)
	// RulesJournal is the file store's write journal (on by default).
	RulesJournal store.JournalOptions `yaml:",inline"`

	// EPP is the ext_proc endpoint picker (docs/epp.md): off while its
	// Addr is empty (the daemon's default; :9002 is the GIE convention).
	EPP epp.Options `yaml:",inline"`
	// EPPRule names the rule that is the EPP's pool (its name, or its key
	// for an unnamed rule). Required with EPP.Addr.
	EPPRule string `yaml:"epp-rule"`

	// GC is the garbage collector's heap floor (gcfloor): the least
	// garbage the heap gathers between collections while its live part is
	// small.
	GC gcfloor.Options `yaml:",inline"`

	// Management API over TLS (LoxiLB's --tls).
	APITLSCert     string `yaml:"api-tls-cert"` // certificate (PEM); with APITLSKey the API serves HTTPS only
	APITLSKey      string `yaml:"api-tls-key"`
	APITLSClientCA string `yaml:"api-tls-client-ca"` // with APITLSCert: require client certificates from this CA (mTLS)
}

// TLSOptions are the datapath certificate store's options with the root
// (default under the state directory) and the SNI registrations file
// resolved.
func (o Options) TLSOptions() tlsmat.Options {
	t := o.TLS
	if t.CertRoot == "" && o.StateDir != "" {
		t.CertRoot = tlsmat.DefaultCertRoot(o.StateDir)
	}
	if o.StateDir != "" {
		t.StateFile = tlsmat.SNIStateFile(o.StateDir)
	}
	return t
}

// DefaultOptions returns the documented defaults: the daemon's own here,
// every other one from its package's DefaultOptions.
func DefaultOptions() Options {
	return Options{
		APIAddr:         "127.0.0.1:11111",
		StateDir:        "/var/lib/infergate",
		LogLevel:        "info",
		LogFormat:       "text",
		ShutdownTimeout: 10 * time.Second,
		Options:         datapath.DefaultOptions(),
		Auth:            auth.DefaultOptions(),
		Tenant:          tenant.DefaultOptions(),
		Etcd:            etcdstore.DefaultOptions(),
		RulesJournal:    store.DefaultJournalOptions(),
		EPP:             defaultEPPOptions(),
		GC:              gcfloor.DefaultOptions(),
	}
}

// defaultEPPOptions are epp's defaults with the picker off: a gateway that
// is not deployed as an EPP must not open gRPC ports it was not asked for.
func defaultEPPOptions() epp.Options {
	o := epp.DefaultOptions()
	o.Addr = ""
	return o
}
