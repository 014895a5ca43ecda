package etcdstore_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/rules/store"
	"github.com/infergate/infergate/rules/store/etcdstore"
	"github.com/infergate/infergate/rules/store/etcdstore/etcdtest"
	"github.com/infergate/infergate/rules/store/storetest"
)

// testCA makes a CA and two leaf certificates (server for 127.0.0.1,
// client) at test time and writes them as PEM files.
type testCA struct{ dir, ca, serverCert, serverKey, clientCert, clientKey string }

func newTestCA(t *testing.T) testCA {
	t.Helper()
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "infergate test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	c := testCA{dir: dir, ca: filepath.Join(dir, "ca.pem")}
	writePEM(t, c.ca, "CERTIFICATE", caDER)
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) (string, string) {
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kd, _ := x509.MarshalECPrivateKey(k)
		cert, key := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		writePEM(t, cert, "CERTIFICATE", der)
		writePEM(t, key, "EC PRIVATE KEY", kd)
		return cert, key
	}
	c.serverCert, c.serverKey = leaf("server", 2, x509.ExtKeyUsageServerAuth)
	c.clientCert, c.clientKey = leaf("client", 3, x509.ExtKeyUsageClientAuth)
	return c
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestMutualTLS: with the CA and a client certificate the store works over
// etcds://; without the client certificate etcd refuses it and the store
// answers 503 store_unavailable.
func TestMutualTLS(t *testing.T) {
	ca := newTestCA(t)
	c := etcdtest.StartWith(t, 1, etcdtest.Config{CertFile: ca.serverCert, KeyFile: ca.serverKey, CAFile: ca.ca})
	open := func(withClientCert bool) *etcdstore.Backend {
		o := etcdstore.DefaultOptions()
		if err := o.ParseURL("etcds://" + c.Endpoints()[0] + "/tls"); err != nil {
			t.Fatal(err)
		}
		o.TLS.CAFile = ca.ca
		if withClientCert {
			o.TLS.CertFile, o.TLS.KeyFile = ca.clientCert, ca.clientKey
		}
		o.RequestTimeout = time.Second
		b, err := etcdstore.Open(o, quietLog(), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	good := open(true)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var err error
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, err = good.Commit(ctx, store.Change{Puts: []store.Put{{Key: storetest.Key(80), Value: storetest.Value(t, 80)}}}); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("commit over mutual TLS: %v", err)
	}
	_, err = open(false).Load(ctx)
	if e, ok := apierror.As(err); !ok || e.Code != apierror.CodeStoreUnavailable {
		t.Fatalf("load without a client certificate: %v, want store_unavailable", err)
	}
}

// TestAuth: with etcd auth on, the store needs the user and the password
// file; a wrong password is refused.
func TestAuth(t *testing.T) {
	c := etcdtest.Start(t, 1)
	pw := c.EnableAuth(t, "s3cret")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	open := func(password string) (*etcdstore.Backend, error) {
		o := etcdstore.DefaultOptions()
		o.Endpoints, o.Prefix, o.Username, o.PasswordFile = c.Endpoints(), "/auth", "root", password
		o.RequestTimeout = time.Second
		return etcdstore.Open(o, quietLog(), nil)
	}
	b, err := open(pw)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.Commit(ctx, store.Change{Puts: []store.Put{{Key: storetest.Key(80), Value: storetest.Value(t, 80)}}}); err != nil {
		t.Fatalf("commit with credentials: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "bad")
	os.WriteFile(bad, []byte("wrong"), 0o600)
	if wb, err := open(bad); err == nil {
		defer wb.Close()
		if _, err := wb.Load(ctx); err == nil {
			t.Fatal("a wrong password was accepted")
		}
	}
}
