package tlsmat

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"path/filepath"
	"testing"

	"github.com/infergate/infergate/tlsmat/tlstest"
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
