package tlsmat

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/tlsmat/tlstest"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func TestStoreRefCountsAndPersistsRegistrations(t *testing.T) {
	ca := tlstest.NewCA(t, "store-root")
	root := t.TempDir()
	ca.Issue(t, tlstest.LeafOptions{CommonName: "default"}).WriteDir(t, root, nil)
	ca.Issue(t, tlstest.LeafOptions{CommonName: "a.example.com"}).WriteDir(t, filepath.Join(root, "a.example.com"), nil)
	elsewhere := filepath.Join(t.TempDir(), "b")
	ca.Issue(t, tlstest.LeafOptions{CommonName: "b.example.com"}).WriteDir(t, elsewhere, nil)
	state := filepath.Join(t.TempDir(), "sni.json")
	opts := DefaultOptions()
	opts.CertRoot, opts.StateFile = root, state

	s := NewStore(opts, nil, nil)
	h1, err := s.Acquire("a.example.com")
	if err != nil {
		t.Fatal(err)
	}
	h2, _ := s.Acquire("a.example.com")
	def, err := s.Acquire("")
	if err != nil || def.Cert().Leaf.Subject.CommonName != "default" {
		t.Fatalf("default certificate: %v", err)
	}
	if err := s.Register("b.example.com", elsewhere); err != nil {
		t.Fatal(err)
	}
	refs := map[string]int{}
	for _, in := range s.List() {
		refs[in.Hostname] = in.RefCount
	}
	if refs["a.example.com"] != 2 || refs[DefaultHostname] != 1 || refs["b.example.com"] != 0 {
		t.Fatalf("refs = %v", refs)
	}
	hb, _ := s.Acquire("b.example.com")
	if err := s.Unregister("b.example.com"); !errors.Is(err, ErrInUse) {
		t.Fatalf("Unregister in use = %v", err)
	}
	hb.Release()
	h1.Release()
	h2.Release()
	def.Release()
	if n := len(s.List()); n != 1 {
		t.Fatalf("after release %d entries, want only the registered one", n)
	}
	// A new store (restart) has the registration back.
	s2 := NewStore(opts, nil, nil)
	if l := s2.List(); len(l) != 1 || l[0].Hostname != "b.example.com" || l[0].CertPath != elsewhere {
		t.Fatalf("after restart: %+v", l)
	}
	if err := s2.Unregister("b.example.com"); err != nil {
		t.Fatal(err)
	}
	if err := s2.Unregister("b.example.com"); !errors.Is(err, ErrNotRegistered) {
		t.Fatalf("second Unregister = %v", err)
	}
	if len(NewStore(opts, nil, nil).List()) != 0 {
		t.Fatal("unregistration not persisted")
	}
}

func TestMatchClientName(t *testing.T) {
	for _, tc := range []struct {
		pattern, cn string
		dns         []string
		want        bool
	}{
		{"*.internal.corp", "svc.internal.corp", nil, true},
		{"*.internal.corp", "laptop", []string{"svc.internal.corp"}, true}, // SAN first
		{"*.internal.corp", "svc.example.com", nil, false},
		{"*.INTERNAL.corp", "Svc.Internal.Corp", nil, true}, // case-insensitive
		{"gw-?", "gw-1", nil, true},
		{"gw-?", "", nil, false},
	} {
		leaf := &x509.Certificate{Subject: pkix.Name{CommonName: tc.cn}, DNSNames: tc.dns}
		if got := MatchClientName(tc.pattern, leaf); got != tc.want {
			t.Errorf("MatchClientName(%q, cn=%q dns=%v) = %v", tc.pattern, tc.cn, tc.dns, got)
		}
	}
}

func TestSecretNeverPrints(t *testing.T) {
	s := Secret("-----BEGIN PRIVATE KEY-----")
	b, _ := s.MarshalJSON()
	if s.String() != Redacted || string(b) != `"`+Redacted+`"` || s.GoString() != Redacted {
		t.Fatalf("secret leaks: %s %s", s.String(), b)
	}
}

func counter(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// A rotation that writes the certificate and then the key is one reload,
// not a mismatched-pair failure; a broken file is one failure and keeps
// the old certificate.
func TestReloadWaitsForFilesToSettle(t *testing.T) {
	ca := tlstest.NewCA(t, "reload-root")
	root := t.TempDir()
	first := ca.Issue(t, tlstest.LeafOptions{CommonName: "first"})
	first.WriteDir(t, root, nil)
	m := metrics.NewTLS(prometheus.NewRegistry())
	opts := DefaultOptions()
	opts.CertRoot = root
	s := NewStore(opts, m, nil)
	h, err := s.Acquire("")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	second := ca.Issue(t, tlstest.LeafOptions{CommonName: "second"})
	poll := func() { time.Sleep(5 * time.Millisecond); s.ReloadChanged(context.Background()) } // mtimes must differ
	tlstest.WriteFile(t, filepath.Join(root, CertFile), second.CertPEM)
	poll() // cert changed, key not yet: pending
	tlstest.WriteFile(t, filepath.Join(root, KeyFile), second.KeyPEM)
	poll() // still moving: pending again
	poll() // held still: loaded
	if cn := h.Cert().Leaf.Subject.CommonName; cn != "second" {
		t.Fatalf("serving %q after rotation", cn)
	}
	if f, r := counter(t, m.ReloadFailures.WithLabelValues(DefaultHostname)), counter(t, m.Reloads.WithLabelValues(DefaultHostname)); f != 0 || r != 1 {
		t.Fatalf("failures %v reloads %v, want 0 and 1", f, r)
	}
	tlstest.WriteFile(t, filepath.Join(root, KeyFile), []byte("broken"))
	poll()
	poll()
	poll() // the same broken version is not retried or recounted
	if f := counter(t, m.ReloadFailures.WithLabelValues(DefaultHostname)); f != 1 {
		t.Fatalf("failures = %v, want 1", f)
	}
	if cn := h.Cert().Leaf.Subject.CommonName; cn != "second" {
		t.Fatalf("a broken file replaced the certificate: %q", cn)
	}
}
