package tlsmat

import (
	"path/filepath"
	"time"
)

// Options configure the certificate store. The daemon composes them; the
// datapath owns the store.
type Options struct {
	// CertRoot is the LoxiLB certificate root: <CertRoot>/server.crt|key is
	// the default certificate, <CertRoot>/<hostname>/ a host's. Empty means
	// DefaultCertRoot(stateDir) as resolved by the daemon.
	CertRoot string `yaml:"cert-root"`
	// StateFile, when set, persists the hostnames registered through the SNI
	// API (hostname → certPath) so they survive a restart.
	StateFile string `yaml:"-"`
	// ReloadInterval is how often certificate files are checked for change.
	// Polling a few stat() calls a second is cheaper and more portable than
	// inotify, and catches rename-into-place rotations the same way. A change
	// is loaded once the files held still for one interval (so within two).
	ReloadInterval time.Duration `yaml:"-"`
	// ExpiryRefresh is how often the expiry gauges are recomputed.
	ExpiryRefresh time.Duration `yaml:"-"`
}

// DefaultOptions returns the documented defaults (CertRoot left to the
// daemon, which knows the state directory).
func DefaultOptions() Options {
	return Options{ReloadInterval: 500 * time.Millisecond, ExpiryRefresh: 30 * time.Second}
}

// DefaultCertRoot is the certificate root under a state directory.
func DefaultCertRoot(stateDir string) string { return filepath.Join(stateDir, "cert") }

// SNIStateFile is where the SNI registrations persist under a state dir.
func SNIStateFile(stateDir string) string { return filepath.Join(stateDir, "sni.json") }

// LoxiLB's file names inside a certificate directory.
const (
	CertFile = "server.crt"
	KeyFile  = "server.key"
	CAFile   = "rootCA.crt"
)
