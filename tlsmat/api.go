package tlsmat

import (
	"crypto/tls"
	"time"
)

// APIServerConfig is the management API's TLS configuration (LoxiLB's
// --tls): a key pair from certFile/keyFile and, when clientCAFile is set,
// mandatory client certificates from that CA (mTLS for operators and the
// CLI). Errors are *MaterialError naming the file.
func APIServerConfig(certFile, keyFile, clientCAFile string, now time.Time) (*tls.Config, error) {
	certPEM, err := readFile(certFile)
	if err != nil {
		return nil, &MaterialError{File: certFile, Reason: describeReadErr("certificate", err)}
	}
	keyPEM, err := readFile(keyFile)
	if err != nil {
		return nil, &MaterialError{File: keyFile, Reason: describeReadErr("private key", err)}
	}
	pair, reason := ParseClientPair(certPEM, keyPEM, now)
	if reason != "" {
		return nil, &MaterialError{File: certFile, Reason: reason}
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{*pair},
		NextProtos:   []string{ALPNH2, ALPNHTTP11},
	}
	if clientCAFile != "" {
		pool, err := LoadCAFile(clientCAFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}
