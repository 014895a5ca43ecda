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
	// HandshakesPerIP bounds the TLS handshakes one client source (an IPv4
	// address, an IPv6 /64) may start per second on the VIPs, all together
	// (handshakerate.go); HandshakeBurstPerIP is the burst above that rate
	// (0: the rate). 0 or less: no limit.
	HandshakesPerIP     float64 `yaml:"tls-handshakes-per-ip"`
	HandshakeBurstPerIP int     `yaml:"tls-handshake-burst-per-ip"`
}

// Default handshake bounds per source: 100 a second is about 7% of a core
// (full ECDSA handshakes), far above what a keep-alive client needs, and a
// burst of 200 lets a client open a pool of connections at once.
const (
	DefaultHandshakesPerIP     = 100
	DefaultHandshakeBurstPerIP = 200
)

// DefaultOptions returns the documented defaults (CertRoot left to the
// daemon, which knows the state directory).
func DefaultOptions() Options {
	return Options{ReloadInterval: 500 * time.Millisecond, ExpiryRefresh: 30 * time.Second,
		HandshakesPerIP: DefaultHandshakesPerIP, HandshakeBurstPerIP: DefaultHandshakeBurstPerIP}
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
