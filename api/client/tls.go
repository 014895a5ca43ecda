package client

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"time"
)

// TLSOptions reach a management API served over HTTPS (infergate serve
// --api-tls-cert; LoxiLB's --tls). They mirror loxicmd's --protocol https,
// --cacert, --cert and --key.
type TLSOptions struct {
	CACert string // PEM bundle trusted for the server certificate ("" = system roots)
	Cert   string // client certificate (PEM) when the API requires mTLS
	Key    string // its private key
}

// Enabled reports whether any TLS option is set.
func (o TLSOptions) Enabled() bool { return o.CACert != "" || o.Cert != "" || o.Key != "" }

// NewHTTPClient builds the HTTP client of the CLI: plain when o is empty,
// else verifying the server with o.CACert and presenting o.Cert/o.Key.
func NewHTTPClient(timeout time.Duration, o TLSOptions) (*http.Client, error) {
	c := &http.Client{Timeout: timeout}
	if !o.Enabled() {
		return c, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.CACert != "" {
		pem, err := os.ReadFile(o.CACert)
		if err != nil {
			return nil, fmt.Errorf("--cacert: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--cacert %s holds no PEM certificate", o.CACert)
		}
		cfg.RootCAs = pool
	}
	if (o.Cert == "") != (o.Key == "") {
		return nil, fmt.Errorf("--cert and --key go together")
	}
	if o.Cert != "" {
		pair, err := tls.LoadX509KeyPair(o.Cert, o.Key)
		if err != nil {
			return nil, fmt.Errorf("--cert/--key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	c.Transport = &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true, Proxy: http.ProxyFromEnvironment}
	return c, nil
}

// WithProtocol applies loxicmd's --protocol (http or https; "" keeps the
// server URL's) to a base URL.
func WithProtocol(server, protocol string) (string, error) {
	switch protocol {
	case "":
		return server, nil
	case "http", "https":
	default:
		return "", fmt.Errorf("--protocol %q: use http or https", protocol)
	}
	u, err := url.Parse(server)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("--server %q is not a URL", server)
	}
	u.Scheme = protocol
	return u.String(), nil
}
