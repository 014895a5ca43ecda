package daemon

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/infergate/infergate/tlsmat"
)

// apiTLS puts the management API behind TLS when --api-tls-cert is set
// (LoxiLB's --tls): ln is wrapped and srv learns the config so HTTP/2 is
// offered. A bad certificate, key or client CA fails boot, naming the file.
func apiTLS(opts Options, ln net.Listener, srv *http.Server) (net.Listener, error) {
	if opts.APITLSCert == "" && opts.APITLSKey == "" {
		if opts.APITLSClientCA != "" {
			_ = ln.Close()
			return nil, fmt.Errorf("daemon: --api-tls-client-ca needs --api-tls-cert and --api-tls-key")
		}
		return ln, nil
	}
	if opts.APITLSCert == "" || opts.APITLSKey == "" {
		_ = ln.Close()
		return nil, fmt.Errorf("daemon: --api-tls-cert and --api-tls-key go together")
	}
	cfg, err := tlsmat.APIServerConfig(opts.APITLSCert, opts.APITLSKey, opts.APITLSClientCA, time.Now())
	if err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("daemon: management API TLS: %w", err)
	}
	srv.TLSConfig = cfg
	return tls.NewListener(ln, cfg), nil
}
