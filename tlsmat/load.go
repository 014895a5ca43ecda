package tlsmat

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// Cert is one loaded, validated key pair. Immutable: a reload makes a new one.
type Cert struct {
	Hostname string // "" for the default certificate
	Dir      string
	TLS      *tls.Certificate
	Leaf     *x509.Certificate
	RootCAs  *x509.CertPool // rootCA.crt when present, else nil
	stamp    fileStamp
}

// NotAfter is the leaf's expiry.
func (c *Cert) NotAfter() time.Time { return c.Leaf.NotAfter }

// fileStamp identifies a version of the files of a directory (mtime and size
// of each), so the watcher reloads only on change.
type fileStamp [3]struct {
	mod  int64
	size int64
}

func stampOf(dir string) fileStamp {
	var s fileStamp
	for i, name := range []string{CertFile, KeyFile, CAFile} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err == nil {
			s[i].mod, s[i].size = fi.ModTime().UnixNano(), fi.Size()
		} else {
			s[i].mod, s[i].size = -1, -1
		}
	}
	return s
}

// LoadPair loads dir/server.crt and dir/server.key (and dir/rootCA.crt when
// present) and validates them at now: both parse, the key matches the
// certificate, the leaf is inside its validity window and, with a root, the
// leaf chains to it.
func LoadPair(hostname, dir string, now time.Time) (*Cert, error) {
	stamp := stampOf(dir)
	certPath, keyPath, caPath := filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile), filepath.Join(dir, CAFile)
	fail := func(file, reason string, err error) error {
		return &MaterialError{Hostname: hostname, File: file, Reason: reason, Err: err}
	}
	certPEM, err := readFile(certPath)
	if err != nil {
		return nil, fail(certPath, describeReadErr("certificate", err), nil)
	}
	if !hasPEM(certPEM, "CERTIFICATE") {
		return nil, fail(certPath, "holds no PEM CERTIFICATE block", nil)
	}
	keyPEM, err := readFile(keyPath)
	if err != nil {
		return nil, fail(keyPath, describeReadErr("private key", err), nil)
	}
	if !hasPEMSuffix(keyPEM, "PRIVATE KEY") {
		return nil, fail(keyPath, "holds no PEM PRIVATE KEY block", nil)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		if _, perr := x509.ParseCertificate(firstDER(certPEM, "CERTIFICATE")); perr != nil {
			return nil, fail(certPath, "certificate does not parse", perr)
		}
		if isMismatch(err) {
			return nil, fail(keyPath, "private key does not match the certificate in "+CertFile, nil)
		}
		return nil, fail(keyPath, "private key does not parse", err)
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fail(certPath, "certificate does not parse", err)
		}
		pair.Leaf = leaf
	}
	if err := checkWindow(leaf, now); err != "" {
		return nil, fail(certPath, err, nil)
	}
	c := &Cert{Hostname: hostname, Dir: dir, TLS: &pair, Leaf: leaf, stamp: stamp}
	if caPEM, err := readFile(caPath); err == nil {
		pool, merr := ParseCAPEM(caPEM)
		if merr != "" {
			return nil, fail(caPath, merr, nil)
		}
		inter := x509.NewCertPool()
		for _, der := range pair.Certificate[1:] {
			if ic, err := x509.ParseCertificate(der); err == nil {
				inter.AddCert(ic)
			}
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, CurrentTime: now,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			return nil, fail(certPath, "certificate does not chain to "+CAFile, err)
		}
		c.RootCAs = pool
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fail(caPath, describeReadErr("CA bundle", err), nil)
	}
	return c, nil
}

// checkWindow returns why leaf is not valid at now, or "".
func checkWindow(leaf *x509.Certificate, now time.Time) string {
	switch {
	case now.Before(leaf.NotBefore):
		return "certificate is not yet valid (valid from " + leaf.NotBefore.UTC().Format(time.RFC3339) + ")"
	case now.After(leaf.NotAfter):
		return "certificate expired at " + leaf.NotAfter.UTC().Format(time.RFC3339)
	}
	return ""
}

// ParseCAPEM parses a CA bundle; the reason is "" on success. A bundle with
// no certificate is an error: an empty pool would silently trust nothing
// (mTLS) or, worse, be mistaken for "use the system roots".
func ParseCAPEM(data []byte) (*x509.CertPool, string) {
	pool := x509.NewCertPool()
	n := 0
	rest := data
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, "CA bundle holds a certificate that does not parse: " + err.Error()
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, "CA bundle holds no certificate"
	}
	return pool, ""
}

// LoadCAFile reads and parses a CA bundle file.
func LoadCAFile(path string) (*x509.CertPool, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, &MaterialError{File: path, Reason: describeReadErr("CA bundle", err)}
	}
	pool, reason := ParseCAPEM(data)
	if reason != "" {
		return nil, &MaterialError{File: path, Reason: reason}
	}
	return pool, nil
}

// LoadCRL reads a PEM or DER certificate revocation list.
func LoadCRL(path string) (*x509.RevocationList, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, &MaterialError{File: path, Reason: describeReadErr("CRL", err)}
	}
	if b, _ := pem.Decode(data); b != nil {
		data = b.Bytes
	}
	crl, err := x509.ParseRevocationList(data)
	if err != nil {
		return nil, &MaterialError{File: path, Reason: "CRL does not parse", Err: err}
	}
	return crl, nil
}

// ParseClientPair parses an inline or file client certificate for engines.
func ParseClientPair(certPEM, keyPEM []byte, now time.Time) (*tls.Certificate, string) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		if isMismatch(err) {
			return nil, "private key does not match the client certificate"
		}
		return nil, "client certificate or key does not parse: " + err.Error()
	}
	if reason := checkWindow(pair.Leaf, now); reason != "" {
		return nil, reason
	}
	return &pair, ""
}

func readFile(path string) ([]byte, error) { return os.ReadFile(path) }

func describeReadErr(what string, err error) string {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return what + " file does not exist"
	case errors.Is(err, fs.ErrPermission):
		return what + " file is not readable (permission denied)"
	}
	return what + " file cannot be read: " + err.Error()
}

func hasPEM(data []byte, typ string) bool {
	return firstDER(data, typ) != nil
}

func hasPEMSuffix(data []byte, suffix string) bool {
	rest := data
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return false
		}
		if bytes.HasSuffix([]byte(b.Type), []byte(suffix)) {
			return true
		}
	}
}

func firstDER(data []byte, typ string) []byte {
	rest := data
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return nil
		}
		if b.Type == typ {
			return b.Bytes
		}
	}
}

// isMismatch recognises crypto/tls's key/certificate mismatch errors.
func isMismatch(err error) bool {
	s := err.Error()
	return bytes.Contains([]byte(s), []byte("does not match")) || bytes.Contains([]byte(s), []byte("type does not match"))
}

// describeLeaf is the one-line identity shown in logs and /status.
func describeLeaf(l *x509.Certificate) string {
	return fmt.Sprintf("subject=%q issuer=%q serial=%s", l.Subject.CommonName, l.Issuer.CommonName, l.SerialNumber.String())
}
