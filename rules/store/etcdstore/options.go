package etcdstore

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"
)

// Options configures the etcd client of a Backend.
type Options struct {
	Endpoints []string `yaml:"-"` // host:port of each member
	Prefix    string   `yaml:"-"` // key prefix, default /infergate

	DialTimeout    time.Duration `yaml:"etcd-dial-timeout"`    // first login with a user (later ones double, up to 16 s), default 2 s
	RequestTimeout time.Duration `yaml:"etcd-request-timeout"` // Load and health probes, default 2 s
	HealthInterval time.Duration `yaml:"-"`                    // how often reachability is probed, default 500 ms
	RetryDelay     time.Duration `yaml:"-"`                    // first pause before re-opening a failed watch, default 100 ms

	TLS TLSOptions `yaml:",inline"`

	// Username authenticates with etcd's auth; the password is read from
	// PasswordFile (never a flag value, so it stays out of ps and history).
	Username     string `yaml:"etcd-user"`
	PasswordFile string `yaml:"etcd-password-file"`
}

// TLSOptions are the client's TLS settings; TLS is on when Enabled or any
// file is set (and with an etcds:// URL).
type TLSOptions struct {
	Enabled    bool   `yaml:"-"`
	CAFile     string `yaml:"etcd-ca"`   // PEM bundle that signs the members' certificates ("" = system roots)
	CertFile   string `yaml:"etcd-cert"` // client certificate (mutual TLS)
	KeyFile    string `yaml:"etcd-key"`
	ServerName string `yaml:"etcd-server-name"` // overrides the name checked in the members' certificates
}

// DefaultOptions returns the documented defaults; Endpoints must be set.
func DefaultOptions() Options {
	return Options{
		Prefix:         "/infergate",
		DialTimeout:    2 * time.Second,
		RequestTimeout: 2 * time.Second,
		HealthInterval: 500 * time.Millisecond,
		RetryDelay:     100 * time.Millisecond,
	}
}

// URL schemes of --store.
const (
	SchemeEtcd    = "etcd"  // plaintext
	SchemeEtcdTLS = "etcds" // TLS
)

// IsURL reports whether s names an etcd store (etcd:// or etcds://).
func IsURL(s string) bool {
	return strings.HasPrefix(s, SchemeEtcd+"://") || strings.HasPrefix(s, SchemeEtcdTLS+"://")
}

// ParseURL fills Endpoints, Prefix and TLS.Enabled from
// etcd://h1:2379,h2:2379/prefix (etcds:// for TLS). The prefix is optional
// and keeps its leading slash.
func (o *Options) ParseURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("store URL %q: %w", s, err)
	}
	switch u.Scheme {
	case SchemeEtcd:
	case SchemeEtcdTLS:
		o.TLS.Enabled = true
	default:
		return fmt.Errorf("store URL %q: scheme must be %s:// or %s://", s, SchemeEtcd, SchemeEtcdTLS)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("store URL %q: credentials and options go in flags, not the URL", s)
	}
	var eps []string
	for _, h := range strings.Split(u.Host, ",") {
		if _, _, err := net.SplitHostPort(h); err != nil {
			return fmt.Errorf("store URL %q: member %q must be host:port", s, h)
		}
		eps = append(eps, h)
	}
	o.Endpoints = eps
	if p := strings.TrimRight(u.Path, "/"); p != "" {
		o.Prefix = p
	}
	return nil
}

func (o *Options) tlsEnabled() bool {
	t := o.TLS
	return t.Enabled || t.CAFile != "" || t.CertFile != "" || t.KeyFile != ""
}

// tlsConfig builds the client's crypto/tls configuration (nil when off).
func (o *Options) tlsConfig() (*tls.Config, error) {
	if !o.tlsEnabled() {
		return nil, nil
	}
	t := o.TLS
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("etcd CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("etcd CA %s: no PEM certificate in it", t.CAFile)
		}
		cfg.RootCAs = pool
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, fmt.Errorf("etcd client certificate: set both the cert and the key file")
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("etcd client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

func (o *Options) password() (string, error) {
	if o.PasswordFile == "" {
		return "", nil
	}
	b, err := os.ReadFile(o.PasswordFile)
	if err != nil {
		return "", fmt.Errorf("etcd password file: %w", err)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

func (o *Options) withDefaults() Options {
	d := DefaultOptions()
	r := *o
	if r.Prefix == "" {
		r.Prefix = d.Prefix
	}
	r.Prefix = "/" + strings.Trim(r.Prefix, "/")
	if r.DialTimeout <= 0 {
		r.DialTimeout = d.DialTimeout
	}
	if r.RequestTimeout <= 0 {
		r.RequestTimeout = d.RequestTimeout
	}
	if r.HealthInterval <= 0 {
		r.HealthInterval = d.HealthInterval
	}
	if r.RetryDelay <= 0 {
		r.RetryDelay = d.RetryDelay
	}
	return r
}
