package tlsmat

import (
	"crypto/tls"
	"time"
)

// ClientParams is the client side toward engines (security 2 with
// mtls_backend), every default resolved by the rules compiler.
type ClientParams struct {
	// Verify checks the engine's certificate against CAPath (or the system
	// roots when CAPath is empty) and the endpoint IP. Default true here;
	// LoxiLB defaults to false (see docs/tls.md).
	Verify   bool
	CAPath   string
	CertPath string // client certificate presented to engines (mTLS)
	KeyPath  string
	CertData string // inline PEM client certificate
	KeyData  Secret // inline PEM client key
}

// Wire paths of mtls_backend fields, for errors.
const (
	fieldBackendCA   = "serviceArguments.mtls_backend.backend_ca_path"
	fieldBackendCert = "serviceArguments.mtls_backend.client_cert_path"
	fieldBackendKey  = "serviceArguments.mtls_backend.client_key_path"
	fieldBackendData = "serviceArguments.mtls_backend.client_cert_data"
)

// NewClientConfig builds the engine-side crypto/tls configuration. The
// caller sets ServerName per endpoint (Clone). Errors are *FieldError.
func NewClientConfig(p ClientParams, now time.Time) (*tls.Config, error) {
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		NextProtos:         []string{ALPNHTTP11}, // the upstream client speaks HTTP/1.1
		InsecureSkipVerify: !p.Verify,            //nolint:gosec // operator's explicit verify_server_cert: false
		ClientSessionCache: tls.NewLRUClientSessionCache(256),
	}
	if p.CAPath != "" {
		pool, err := LoadCAFile(p.CAPath)
		if err != nil {
			return nil, &FieldError{Field: fieldBackendCA, MaterialError: err.(*MaterialError)}
		}
		cfg.RootCAs = pool
	}
	var certPEM, keyPEM []byte
	switch {
	case p.CertData != "":
		certPEM, keyPEM = []byte(p.CertData), []byte(p.KeyData)
	case p.CertPath != "":
		var err error
		if certPEM, err = readFile(p.CertPath); err != nil {
			return nil, &FieldError{Field: fieldBackendCert, MaterialError: &MaterialError{File: p.CertPath, Reason: describeReadErr("client certificate", err)}}
		}
		if keyPEM, err = readFile(p.KeyPath); err != nil {
			return nil, &FieldError{Field: fieldBackendKey, MaterialError: &MaterialError{File: p.KeyPath, Reason: describeReadErr("client key", err)}}
		}
	}
	if certPEM != nil {
		pair, reason := ParseClientPair(certPEM, keyPEM, now)
		if reason != "" {
			field, file := fieldBackendData, ""
			if p.CertData == "" {
				field, file = fieldBackendCert, p.CertPath
			}
			return nil, &FieldError{Field: field, MaterialError: &MaterialError{File: file, Reason: reason}}
		}
		cfg.Certificates = []tls.Certificate{*pair}
	}
	return cfg, nil
}
