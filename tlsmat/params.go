package tlsmat

import (
	"crypto/tls"
	"slices"
	"strconv"
	"strings"
)

// Wire names of TLS versions (Octavia/LoxiLB spelling) and ALPN protocols.
const (
	VersionTLS12 = "TLSv1.2"
	VersionTLS13 = "TLSv1.3"
	ALPNH2       = "h2"
	ALPNHTTP11   = "http/1.1"
)

// DefaultVersions and DefaultALPN apply when a rule leaves the field empty.
var (
	DefaultVersions = []string{VersionTLS12, VersionTLS13}
	DefaultALPN     = []string{ALPNH2, ALPNHTTP11}
)

// ParseVersion maps a tls_versions entry to crypto/tls's constant. SSLv3,
// TLS 1.0 and TLS 1.1 are refused with the reason (RFC 8996 deprecates them).
func ParseVersion(name string) (uint16, string) {
	switch strings.ToUpper(strings.ReplaceAll(name, "_", ".")) {
	case "TLSV1.2", "TLS1.2", "1.2":
		return tls.VersionTLS12, ""
	case "TLSV1.3", "TLS1.3", "1.3":
		return tls.VersionTLS13, ""
	case "SSLV3", "SSLV3.0", "SSL3", "TLSV1", "TLSV1.0", "TLS1.0", "1.0", "TLSV1.1", "TLS1.1", "1.1":
		return 0, name + " is insecure and not served (RFC 8996); use TLSv1.2 and/or TLSv1.3"
	}
	return 0, name + ` is not a TLS version; use "TLSv1.2" or "TLSv1.3"`
}

// VersionRange turns a validated version list into crypto/tls's min/max.
// crypto/tls serves a contiguous range, so {1.2, 1.3} and either alone are
// all that can be asked for once 1.0/1.1 are refused.
func VersionRange(names []string) (min, max uint16) {
	if len(names) == 0 {
		names = DefaultVersions
	}
	for _, n := range names {
		v, _ := ParseVersion(n)
		if v == 0 {
			continue
		}
		if min == 0 || v < min {
			min = v
		}
		if v > max {
			max = v
		}
	}
	return min, max
}

// VersionName is the wire name of a negotiated version (metrics labels).
func VersionName(v uint16) string {
	switch v {
	case tls.VersionTLS12:
		return VersionTLS12
	case tls.VersionTLS13:
		return VersionTLS13
	case 0:
		return "none"
	}
	return "other"
}

// openSSLCiphers maps OpenSSL's names (what LoxiLB and Octavia's
// tls_ciphers carry) to the TLS 1.2 suites crypto/tls implements securely.
var openSSLCiphers = map[string]uint16{
	"ECDHE-ECDSA-AES128-GCM-SHA256": tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	"ECDHE-RSA-AES128-GCM-SHA256":   tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	"ECDHE-ECDSA-AES256-GCM-SHA384": tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	"ECDHE-RSA-AES256-GCM-SHA384":   tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	"ECDHE-ECDSA-CHACHA20-POLY1305": tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	"ECDHE-RSA-CHACHA20-POLY1305":   tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// ParseCiphers parses tls_ciphers: a colon (or comma) separated list of
// OpenSSL or IANA suite names, TLS 1.2 only (crypto/tls does not let TLS 1.3
// suites be chosen, and they are all strong). Insecure or unknown names are
// refused with the reason.
func ParseCiphers(s string) ([]uint16, string) {
	if strings.TrimSpace(s) == "" {
		return nil, ""
	}
	secure := map[string]uint16{}
	for _, c := range tls.CipherSuites() {
		secure[c.Name] = c.ID
	}
	insecure := map[string]bool{}
	for _, c := range tls.InsecureCipherSuites() {
		insecure[c.Name] = true
	}
	var out []uint16
	for _, name := range strings.FieldsFunc(s, func(r rune) bool { return r == ':' || r == ',' || r == ' ' }) {
		id, ok := openSSLCiphers[name]
		if !ok {
			id, ok = secure[name]
		}
		switch {
		case ok && isTLS13Suite(id):
			return nil, name + " is a TLS 1.3 suite; TLS 1.3 suites are not configurable (all are strong)"
		case ok:
			if !slices.Contains(out, id) {
				out = append(out, id)
			}
		case insecure[name]:
			return nil, name + " is an insecure cipher suite and is not served"
		default:
			return nil, name + " is not a supported TLS 1.2 cipher suite"
		}
	}
	return out, ""
}

func isTLS13Suite(id uint16) bool {
	return id == tls.TLS_AES_128_GCM_SHA256 || id == tls.TLS_AES_256_GCM_SHA384 || id == tls.TLS_CHACHA20_POLY1305_SHA256
}

// CheckALPN validates alpn_protocols entries: only HTTP/2 and HTTP/1.1 are
// served on a VIP.
func CheckALPN(protos []string) string {
	for _, p := range protos {
		if p != ALPNH2 && p != ALPNHTTP11 {
			return p + ` is not a served ALPN protocol; use "h2" and/or "http/1.1"`
		}
	}
	return ""
}

// HSTSValue builds the Strict-Transport-Security header value ("" = none).
func HSTSValue(maxAge int, includeSub, preload bool) string {
	if maxAge <= 0 {
		return ""
	}
	v := "max-age=" + strconv.Itoa(maxAge)
	if includeSub {
		v += "; includeSubDomains"
	}
	if preload {
		v += "; preload"
	}
	return v
}
