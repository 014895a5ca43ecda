package daemon

import (
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// TestOptionsYAML: the composed options map onto yaml under the flag names
// (inline sub-structs, no duplicate names), so a config file can fill the
// same struct the flags do; keys a file leaves out keep their defaults.
func TestOptionsYAML(t *testing.T) {
	if _, err := yaml.Marshal(DefaultOptions()); err != nil {
		t.Fatalf("marshal defaults: %v", err)
	}
	doc := `
api-addr: 127.0.0.1:9
prefill-timeout: 2s
stream-idle-timeout: 3s
kv-bind-addr: tcp://0.0.0.0:5557
prefix-key-max-bytes: 4096
max-client-conns: 10
max-body-bytes-in-flight: 1024
cert-root: /certs
api-token-file: /tokens
tenant-max-keys: 7
etcd-ca: /ca.pem
etcd-dial-timeout: 1s
`
	got := DefaultOptions()
	if err := yaml.Unmarshal([]byte(doc), &got); err != nil {
		t.Fatal(err)
	}
	want := DefaultOptions()
	want.APIAddr = "127.0.0.1:9"
	want.PrefillTimeout, want.StreamIdleTimeout = 2*time.Second, 3*time.Second
	want.KV.BindAddr = "tcp://0.0.0.0:5557"
	want.PrefixIndex.MaxKeyBytes = 4096
	want.Admission.MaxConns = 10
	want.Bodies.MaxInFlightBytes = 1024
	want.TLS.CertRoot = "/certs"
	want.Auth.TokenFile = "/tokens"
	want.Tenant.MaxKeysPerTenant = 7
	want.Etcd.TLS.CAFile = "/ca.pem"
	want.Etcd.DialTimeout = time.Second
	a, _ := yaml.Marshal(got)
	b, _ := yaml.Marshal(want)
	if string(a) != string(b) {
		t.Fatalf("options from yaml:\n%s\nwant:\n%s", a, b)
	}
}
