package etcdstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/rules/store/etcdstore"
	"github.com/infergate/infergate/rules/store/etcdstore/etcdtest"
)

func TestRegistrationValidate(t *testing.T) {
	ok := etcdstore.Registration{URL: "http://10.0.0.5:8000", Role: "prefill", Engine: "vllm", Model: "m", NixlPort: 5600}
	tests := []struct {
		name  string
		edit  func(r *etcdstore.Registration)
		field string // "" = valid
	}{
		{"valid vLLM prefill", func(*etcdstore.Registration) {}, ""},
		{"valid SGLang prefill", func(r *etcdstore.Registration) { r.Engine, r.NixlPort, r.BootstrapPort = "sglang", 0, 8998 }, ""},
		{"hostname url", func(r *etcdstore.Registration) { r.URL = "http://engine:8000" }, "url"},
		{"no port", func(r *etcdstore.Registration) { r.URL = "http://10.0.0.5" }, "url"},
		{"bad role", func(r *etcdstore.Registration) { r.Role = "both" }, "role"},
		{"llama.cpp", func(r *etcdstore.Registration) { r.Engine = "llamacpp" }, "engine"},
		{"no model", func(r *etcdstore.Registration) { r.Model = " " }, "model"},
		{"SGLang prefill without bootstrap", func(r *etcdstore.Registration) { r.Engine, r.NixlPort = "sglang", 0 }, "bootstrap_port"},
		{"NIXL on SGLang", func(r *etcdstore.Registration) { r.Engine, r.BootstrapPort = "sglang", 1 }, "nixl_port"},
		{"bootstrap on vLLM", func(r *etcdstore.Registration) { r.BootstrapPort = 1 }, "bootstrap_port"},
		{"port out of range", func(r *etcdstore.Registration) { r.KVZmqPort = 70000 }, "kvZmqPort"},
		{"unspecified IPv4", func(r *etcdstore.Registration) { r.URL = "http://0.0.0.0:8000" }, "url"},
		{"unspecified IPv6", func(r *etcdstore.Registration) { r.URL = "http://[::]:8000" }, "url"},
		{"pairing facts", func(r *etcdstore.Registration) { r.KVCacheDtype, r.PairingProtocol = "fp8", "nixl" }, ""},
		{"bootstrap on a vLLM Mooncake prefill", func(r *etcdstore.Registration) { r.KVConnector, r.BootstrapPort = "MooncakeConnector", 8998 }, ""},
		{"bootstrap on a vLLM Mooncake decode", func(r *etcdstore.Registration) {
			r.Role, r.KVConnector, r.BootstrapPort = "decode", "MooncakeConnector", 8998
		}, "bootstrap_port"},
		{"labels", func(r *etcdstore.Registration) {
			r.Labels = map[string]string{"example.com/zone": "a", "kv_engine_id": "e-1"}
		}, ""},
		{"label key with a space", func(r *etcdstore.Registration) { r.Labels = map[string]string{"my zone": "a"} }, "labels.my zone"},
		{"label value with a newline", func(r *etcdstore.Registration) { r.Labels = map[string]string{"zone": "a\nb"} }, "labels.zone"},
		{"too many labels", func(r *etcdstore.Registration) {
			r.Labels = map[string]string{}
			for i := range 17 {
				r.Labels[fmt.Sprint("k", i)] = "v"
			}
		}, "labels"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := ok
			tc.edit(&r)
			err := r.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tc.field+":") {
				t.Fatalf("error %v, want one naming %s", err, tc.field)
			}
		})
	}
}

// TestRegisterLease: a registration is listed while its registrar runs,
// disappears at once on a clean stop, and within the TTL when the
// registrar dies without revoking (its client is closed under it); an
// invalid one is refused and never written; a foreign value is listed as
// refused.
func TestRegisterLease(t *testing.T) {
	c := etcdtest.Start(t, 1)
	list := func() []etcdstore.EngineEntry {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		e, err := etcdstore.Engines(ctx, c.Client(t), "/reg")
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	reg := etcdstore.Registration{URL: "http://10.0.0.5:8000", Role: "decode", Engine: "vllm", Model: "m"}
	b := openBackend(t, c.Endpoints(), "/reg")
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Register(ctx, reg, 2*time.Second, nil) }()
	eventually(t, 5*time.Second, "the registration", func() bool { e := list(); return len(e) == 1 && e[0].Refused == "" })
	time.Sleep(3 * time.Second) // longer than the TTL: keepalive holds it
	if len(list()) != 1 {
		t.Fatal("registration expired while its registrar was alive")
	}
	cancel()
	<-done
	if len(list()) != 0 {
		t.Fatal("a clean stop did not deregister")
	}

	// A registrar that dies: its client goes away without revoking.
	b2 := openBackend(t, c.Endpoints(), "/reg")
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	go func() { _ = b2.Register(ctx2, reg, 2*time.Second, nil) }()
	eventually(t, 5*time.Second, "the second registration", func() bool { return len(list()) == 1 })
	etcdstore.KillClient(b2)
	eventually(t, 10*time.Second, "the dead engine's lease to expire", func() bool { return len(list()) == 0 })

	bad := reg
	bad.Engine = "sglang"
	bad.Role = "prefill"
	if err := b.Register(context.Background(), bad, time.Second, nil); err == nil || !strings.Contains(err.Error(), "bootstrap_port") {
		t.Fatalf("invalid registration: %v", err)
	}
	put(t, c.Client(t), "/reg/engines/10.0.0.9:1", `{"url":"http://10.0.0.9:1","role":"x"}`)
	if e := list(); len(e) != 1 || !strings.HasPrefix(e[0].Refused, "role:") {
		t.Fatalf("foreign value listed as %+v", e)
	}
}

func TestRegistrationPairFacts(t *testing.T) {
	if f := (etcdstore.Registration{}).PairFacts(); f != nil {
		t.Errorf("no facts: %v, want nil", f)
	}
	got := etcdstore.Registration{BlockSize: 32, KVConnector: "MooncakeConnector", KVCacheDtype: "fp8", PairingProtocol: "x"}.PairFacts()
	want := map[string]string{"block_size": "32", "kv_connector": "MooncakeConnector", "kv_cache_dtype": "fp8", "pairing_protocol": "x"}
	if len(got) != len(want) {
		t.Fatalf("facts %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
}
