package tlsmat

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/tlsmat/tlstest"
)

func TestLoadPairRefusesBadMaterial(t *testing.T) {
	ca := tlstest.NewCA(t, "test-root")
	other := tlstest.NewCA(t, "other-root")
	good := ca.Issue(t, tlstest.LeafOptions{CommonName: "api.example.com"})
	second := ca.Issue(t, tlstest.LeafOptions{CommonName: "api.example.com"})
	expired := ca.Issue(t, tlstest.LeafOptions{NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	future := ca.Issue(t, tlstest.LeafOptions{NotBefore: time.Now().Add(time.Hour), NotAfter: time.Now().Add(48 * time.Hour)})

	cases := []struct {
		name     string
		setup    func(dir string)
		wantFile string
		wantWhy  string
	}{
		{"ok", func(d string) { good.WriteDir(t, d, ca) }, "", ""},
		{"ok without root", func(d string) { good.WriteDir(t, d, nil) }, "", ""},
		{"missing cert", func(d string) { _ = os.MkdirAll(d, 0o700) }, CertFile, "does not exist"},
		{"missing key", func(d string) {
			good.WriteDir(t, d, nil)
			_ = os.Remove(filepath.Join(d, KeyFile))
		}, KeyFile, "does not exist"},
		{"expired", func(d string) { expired.WriteDir(t, d, nil) }, CertFile, "expired at"},
		{"not yet valid", func(d string) { future.WriteDir(t, d, nil) }, CertFile, "not yet valid"},
		{"mismatched pair", func(d string) {
			good.WriteDir(t, d, nil)
			tlstest.WriteFile(t, filepath.Join(d, KeyFile), second.KeyPEM)
		}, KeyFile, "does not match"},
		{"garbage key", func(d string) {
			good.WriteDir(t, d, nil)
			tlstest.WriteFile(t, filepath.Join(d, KeyFile), []byte("not a key"))
		}, KeyFile, "no PEM PRIVATE KEY"},
		{"unreadable key", func(d string) {
			good.WriteDir(t, d, nil)
			_ = os.Remove(filepath.Join(d, KeyFile))
			_ = os.Mkdir(filepath.Join(d, KeyFile), 0o700) // a directory reads as an error even for root
		}, KeyFile, "cannot be read"},
		{"empty CA bundle", func(d string) {
			good.WriteDir(t, d, nil)
			tlstest.WriteFile(t, filepath.Join(d, CAFile), []byte("# nothing here\n"))
		}, CAFile, "holds no certificate"},
		{"wrong root", func(d string) { good.WriteDir(t, d, other) }, CertFile, "does not chain"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "api.example.com")
			tc.setup(dir)
			c, err := LoadPair("api.example.com", dir, time.Now())
			if tc.wantWhy == "" {
				if err != nil || c.Leaf == nil {
					t.Fatalf("LoadPair: %v", err)
				}
				return
			}
			me, ok := err.(*MaterialError)
			if !ok {
				t.Fatalf("err = %v (%T), want *MaterialError", err, err)
			}
			if filepath.Base(me.File) != tc.wantFile || !strings.Contains(me.Reason, tc.wantWhy) || me.Hostname != "api.example.com" {
				t.Fatalf("got file %q reason %q host %q; want file %s reason ~%q", me.File, me.Reason, me.Hostname, tc.wantFile, tc.wantWhy)
			}
		})
	}
}

func TestParseParams(t *testing.T) {
	for _, tc := range []struct {
		in  string
		ok  bool
		why string
	}{
		{"TLSv1.2", true, ""}, {"TLSv1.3", true, ""}, {"SSLv3", false, "insecure"},
		{"TLSv1", false, "insecure"}, {"TLSv1.0", false, "insecure"}, {"TLSv1.1", false, "insecure"}, {"TLSv9", false, "not a TLS version"},
	} {
		v, why := ParseVersion(tc.in)
		if (v != 0) != tc.ok || !strings.Contains(why, tc.why) {
			t.Errorf("ParseVersion(%q) = %d, %q", tc.in, v, why)
		}
	}
	for _, tc := range []struct {
		in  string
		n   int
		why string
	}{
		{"ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES256-GCM-SHA384", 2, ""},
		{"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", 1, ""},
		{"TLS_RSA_WITH_RC4_128_SHA", 0, "insecure"},
		{"TLS_AES_128_GCM_SHA256", 0, "TLS 1.3"},
		{"NOPE", 0, "not a supported"},
	} {
		ids, why := ParseCiphers(tc.in)
		if len(ids) != tc.n || !strings.Contains(why, tc.why) {
			t.Errorf("ParseCiphers(%q) = %v, %q", tc.in, ids, why)
		}
	}
	if why := CheckALPN([]string{"h2", "http/1.1"}); why != "" {
		t.Error(why)
	}
	if why := CheckALPN([]string{"h3"}); why == "" {
		t.Error("h3 accepted")
	}
	if got := HSTSValue(31536000, true, true); got != "max-age=31536000; includeSubDomains; preload" {
		t.Error(got)
	}
}
