package auth

import "time"

// Options configure management API access control.
type Options struct {
	// TokenFile is the operator's token file ("" = no tokens: every request
	// that passes the Host check is allowed; only valid on loopback).
	TokenFile string `yaml:"api-token-file"`
	// AllowedHosts are extra Host values the API answers to: its DNS name,
	// a load balancer's name, "*.example.com" for subdomains, or an IP
	// literal (a Service address). Loopback IPs, the listen address,
	// localhost and *.localhost are always allowed (HostPolicy).
	AllowedHosts []string `yaml:"api-allowed-host"`
	// OpenMetrics serves /metrics without a token even when a token file
	// is set (for a Prometheus that cannot send one).
	OpenMetrics bool `yaml:"api-open-metrics"`
	// Insecure allows a non-loopback API address without a token file.
	Insecure bool `yaml:"insecure-api"`
	// ReloadInterval is how often the token file is checked for changes
	// (SIGHUP reloads at once); <= 0 disables polling.
	ReloadInterval time.Duration `yaml:"api-token-reload-interval"`
}

// DefaultReloadInterval is the token file poll period: short enough that a
// rotation takes effect before an operator has switched windows, long
// enough to cost nothing (one small read).
const DefaultReloadInterval = 2 * time.Second

// DefaultOptions returns the documented defaults: no tokens (loopback
// only), metrics behind the token once one is configured.
func DefaultOptions() Options {
	return Options{ReloadInterval: DefaultReloadInterval}
}
