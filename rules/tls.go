package rules

import (
	"fmt"
	"path"
	"time"

	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/spec"
	"github.com/infergate/infergate/tlsmat"
)

// TLS fields. Validation here is pure (no file I/O): names,
// combinations and inline PEM. Files (certificates, CA bundles, CRLs) are
// loaded and checked by the datapath through tlsmat when the rule is
// installed, so a missing or bad file is still a 400 before anything is
// served, and boot replay sees the files as they are then.

// mtlsPath and backendPath build field paths of the nested TLS objects.
func mtlsPath(name string) string    { return saPath(fieldMTLSFrontend) + "." + name }
func backendPath(name string) string { return saPath(fieldMTLSBackend) + "." + name }

// checkTLS validates every TLS field against security and each other.
func checkTLS(r *Rule) *apierror.Error {
	sa := &r.ServiceArguments
	if sa.Security == spec.SecurityPlain {
		return checkNoTLSOnPlain(sa)
	}
	for i, v := range sa.TLSVersions {
		if _, why := tlsmat.ParseVersion(v); why != "" {
			return invalidField(fmt.Sprintf("%s[%d]", saPath(fieldTLSVersions), i), "", why)
		}
	}
	ciphers, why := tlsmat.ParseCiphers(sa.TLSCiphers)
	if why != "" {
		return invalidField(saPath(fieldTLSCiphers), "", why)
	}
	if min, _ := tlsmat.VersionRange(sa.TLSVersions); len(ciphers) > 0 && min == versionTLS13 {
		return invalidCombo(saPath(fieldTLSCiphers), "", "tls_ciphers apply to TLSv1.2 only, and tls_versions allows only TLSv1.3")
	}
	if sa.Host != "" {
		if why := tlsmat.CheckHostname(sa.Host); why != "" {
			return invalidField(saPath(fieldHost), "", "host names the TLS certificate directory: "+why)
		}
	}
	if why := tlsmat.CheckALPN(sa.ALPNProtocols); why != "" {
		return invalidField(saPath(fieldALPNProtocols), "", why)
	}
	switch {
	case sa.HSTSMaxAge < 0 || sa.HSTSMaxAge > maxHSTSMaxAge:
		return invalidField(saPath(fieldHSTSMaxAge), "", fmt.Sprintf("hsts_max_age must be within 0..%d seconds", maxHSTSMaxAge))
	case sa.HSTSMaxAge == 0 && sa.HSTSIncludeSubdomains:
		return invalidCombo(saPath(fieldHSTSIncludeSubdomains), "", "hsts_include_subdomains needs hsts_max_age > 0 (no header is sent without it)")
	case sa.HSTSMaxAge == 0 && sa.HSTSPreload:
		return invalidCombo(saPath(fieldHSTSPreload), "", "hsts_preload needs hsts_max_age > 0 (no header is sent without it)")
	}
	if err := checkMTLSFrontend(sa.MTLSFrontend); err != nil {
		return err
	}
	if sa.MTLSBackend != nil && sa.Security != spec.SecurityEndToEnd {
		return invalidCombo(saPath(fieldMTLSBackend), "", "mtls_backend is only valid with security 2 (end-to-end TLS to the engines)")
	}
	return checkMTLSBackend(sa.MTLSBackend)
}

const (
	versionTLS13  = 0x0304
	maxHSTSMaxAge = 2 * 365 * 24 * 3600
)

func checkNoTLSOnPlain(sa *ServiceArguments) *apierror.Error {
	var field string
	switch {
	case sa.MTLSFrontend != nil:
		field = fieldMTLSFrontend
	case sa.MTLSBackend != nil:
		field = fieldMTLSBackend
	case len(sa.TLSVersions) > 0:
		field = fieldTLSVersions
	case sa.TLSCiphers != "":
		field = fieldTLSCiphers
	case len(sa.ALPNProtocols) > 0:
		field = fieldALPNProtocols
	case sa.HSTSMaxAge != 0:
		field = fieldHSTSMaxAge
	case sa.HSTSIncludeSubdomains:
		field = fieldHSTSIncludeSubdomains
	case sa.HSTSPreload:
		field = fieldHSTSPreload
	default:
		return nil
	}
	return invalidCombo(saPath(field), "", field+" is only valid with security 1 (TLS termination) or 2 (end-to-end TLS); this rule has security 0")
}

func checkMTLSFrontend(m *MTLSFrontend) *apierror.Error {
	if m == nil {
		return nil
	}
	switch m.ClientCertMode {
	case "", tlsmat.ClientCertDisabled:
		switch {
		case m.RequireClientCN:
			return invalidCombo(mtlsPath(fieldRequireClientCN), "", "require_client_cn needs client_cert_mode optional or required")
		case m.ClientCRLPath != "":
			return invalidCombo(mtlsPath(fieldClientCRLPath), "", "client_crl_path needs client_cert_mode optional or required")
		}
		return nil
	case tlsmat.ClientCertOptional, tlsmat.ClientCertRequired:
	default:
		return invalidField(mtlsPath(fieldClientCertMode), "",
			fmt.Sprintf("client_cert_mode %q is not one of disabled, optional, required", m.ClientCertMode))
	}
	switch {
	case m.ClientCAPath == "" && m.ClientCACertData == "":
		return invalidCombo(mtlsPath(fieldClientCertMode), "",
			"client_cert_mode "+m.ClientCertMode+" needs a client CA: set client_ca_path or client_ca_cert_data")
	case m.ClientCAPath != "" && m.ClientCACertData != "":
		return invalidCombo(mtlsPath(fieldClientCACertData), "", "set client_ca_path or client_ca_cert_data, not both")
	case m.RequireClientCN && m.ClientCNPattern == "":
		return invalidCombo(mtlsPath(fieldClientCNPattern), "", "require_client_cn needs client_cn_pattern (e.g. *.internal.example.com)")
	}
	if m.ClientCNPattern != "" {
		if _, err := path.Match(m.ClientCNPattern, ""); err != nil {
			return invalidField(mtlsPath(fieldClientCNPattern), "", "client_cn_pattern is not a valid pattern: "+err.Error())
		}
	}
	if m.ClientCACertData != "" {
		if _, why := tlsmat.ParseCAPEM([]byte(m.ClientCACertData)); why != "" {
			return invalidField(mtlsPath(fieldClientCACertData), "", why)
		}
	}
	return nil
}

func checkMTLSBackend(b *MTLSBackend) *apierror.Error {
	if b == nil {
		return nil
	}
	switch {
	case b.ClientKeyData == tlsmat.Redacted:
		return invalidField(backendPath(fieldClientKeyData), "",
			"client_key_data holds the redaction marker GET shows; send the PEM key (or use client_key_path)")
	case (b.ClientCertPath != "" || b.ClientKeyPath != "") && (b.ClientCertData != "" || b.ClientKeyData != ""):
		return invalidCombo(backendPath(fieldClientCertData), "", "set the client certificate by path or by inline data, not both")
	case (b.ClientCertPath == "") != (b.ClientKeyPath == ""):
		return invalidCombo(backendPath(fieldClientKeyPath), "", "client_cert_path and client_key_path go together")
	case (b.ClientCertData == "") != (b.ClientKeyData == ""):
		return invalidCombo(backendPath(fieldClientKeyData), "", "client_cert_data and client_key_data go together")
	}
	if b.ClientCertData != "" {
		if _, why := tlsmat.ParseClientPair([]byte(b.ClientCertData), []byte(b.ClientKeyData), time.Now()); why != "" {
			return invalidField(backendPath(fieldClientCertData), "", why)
		}
	}
	return nil
}

// compileTLS resolves a valid rule's TLS fields (nil for security 0).
func compileTLS(sa *ServiceArguments) *spec.TLS {
	if sa.Security == spec.SecurityPlain {
		return nil
	}
	min, max := tlsmat.VersionRange(sa.TLSVersions)
	ciphers, _ := tlsmat.ParseCiphers(sa.TLSCiphers)
	alpn := sa.ALPNProtocols
	if len(alpn) == 0 {
		alpn = tlsmat.DefaultALPN
	}
	t := &spec.TLS{
		Security: sa.Security,
		Server: tlsmat.ServerParams{
			CertHost: sa.Host, MinVersion: min, MaxVersion: max, Ciphers: ciphers,
			ALPN: append([]string(nil), alpn...),
			HSTS: tlsmat.HSTSValue(sa.HSTSMaxAge, sa.HSTSIncludeSubdomains, sa.HSTSPreload),
		},
	}
	if m := sa.MTLSFrontend; m != nil && m.ClientCertMode != "" && m.ClientCertMode != tlsmat.ClientCertDisabled {
		t.Server.Client = &tlsmat.ClientAuth{
			Mode: m.ClientCertMode, CAPath: m.ClientCAPath, CAData: m.ClientCACertData,
			RequireCN: m.RequireClientCN, CNPattern: m.ClientCNPattern, CRLPath: m.ClientCRLPath,
		}
	}
	if sa.Security == spec.SecurityEndToEnd {
		b := sa.MTLSBackend
		if b == nil {
			b = &MTLSBackend{}
		}
		t.Backend = &tlsmat.ClientParams{
			Verify: b.VerifyServerCert == nil || *b.VerifyServerCert,
			CAPath: b.BackendCAPath, CertPath: b.ClientCertPath, KeyPath: b.ClientKeyPath,
			CertData: b.ClientCertData, KeyData: tlsmat.Secret(b.ClientKeyData),
		}
	}
	return t
}

// normalizeTLS makes the stored form canonical and unshared: empty lists
// are nil (so [] and absent compare equal) and nested objects are copied.
func normalizeTLS(sa *ServiceArguments) {
	if len(sa.TLSVersions) == 0 {
		sa.TLSVersions = nil
	} else {
		sa.TLSVersions = append([]string(nil), sa.TLSVersions...)
	}
	if len(sa.ALPNProtocols) == 0 {
		sa.ALPNProtocols = nil
	} else {
		sa.ALPNProtocols = append([]string(nil), sa.ALPNProtocols...)
	}
	sa.MTLSFrontend = clonePtr(sa.MTLSFrontend)
	if sa.MTLSBackend != nil {
		b := *sa.MTLSBackend
		b.VerifyServerCert = clonePtr(b.VerifyServerCert)
		sa.MTLSBackend = &b
	}
}

// redactTLS replaces inline key material with tlsmat.Redacted (GET).
func redactTLS(sa *ServiceArguments) {
	normalizeTLS(sa) // a private copy before changing it
	if b := sa.MTLSBackend; b != nil && b.ClientKeyData != "" {
		b.ClientKeyData = tlsmat.Redacted
	}
}
