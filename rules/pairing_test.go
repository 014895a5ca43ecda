package rules

import (
	"reflect"
	"testing"

	"github.com/infergate/infergate/spec"
)

func v6VIP(r *Rule) {
	r.ServiceArguments.ExternalIP = "2001:db8::10"
	r.Endpoints[0].EndpointIP, r.Endpoints[1].EndpointIP = "2001:db8::1", "2001:db8::2"
}

func TestPairingRejects(t *testing.T) {
	const (
		bad   = 400
		field = "invalid_field"
		combo = "invalid_combination"
	)
	sglang := func(r *Rule) {
		r.ServiceArguments.KVEngineType = "sglang"
		r.Endpoints[0].NixlPort = 0
	}
	tests := []struct {
		name   string
		base   func() Rule
		mutate func(*Rule)
		code   string
		field  string
	}{
		{"pairing mode unknown", pdRule, func(r *Rule) { r.ServiceArguments.PDPairingMode = "loose" }, field, "serviceArguments.pd_pairing_mode"},
		{"pairing mode without P/D", plainRule, func(r *Rule) { r.ServiceArguments.PDPairingMode = "strict" }, combo, "serviceArguments.pd_pairing_mode"},
		{"connector with a space", pdRule, func(r *Rule) { r.Endpoints[0].KVConnector = "Nixl Connector" }, field, "endpoints[0].kv_connector"},
		{"dtype too long", pdRule, func(r *Rule) { r.Endpoints[1].KVCacheDtype = string(make([]byte, 65)) }, field, "endpoints[1].kv_cache_dtype"},
		{"protocol with a comma", pdRule, func(r *Rule) { r.Endpoints[1].PairingProtocol = "a,b" }, field, "endpoints[1].pairing_protocol"},
		{"block size too big", pdRule, func(r *Rule) { r.Endpoints[0].KVBlockSize = 5000 }, field, "endpoints[0].kv_block_size"},
		{"block size negative", pdRule, func(r *Rule) { r.Endpoints[0].KVBlockSize = -1 }, field, "endpoints[0].kv_block_size"},
		{"facts without P/D", plainRule, func(r *Rule) { r.Endpoints[0].KVBlockSize = 16 }, combo, "endpoints[0].kv_block_size"},
		{"bootstrap_port on vLLM", pdRule, func(r *Rule) { r.Endpoints[0].BootstrapPort = 8998 }, combo, "endpoints[0].bootstrap_port"},
		{"bootstrap_port on a vLLM NIXL prefill", pdRule, func(r *Rule) {
			r.Endpoints[0].KVConnector, r.Endpoints[0].BootstrapPort = "NixlConnector", 8998
		}, combo, "endpoints[0].bootstrap_port"},
		{"bootstrap_port on a vLLM Mooncake decode", pdRule, func(r *Rule) {
			r.Endpoints[1].KVConnector, r.Endpoints[1].BootstrapPort = "MooncakeConnector", 8998
		}, combo, "endpoints[1].bootstrap_port"},
		{"bootstrap_port on an SGLang decode", pdRule, func(r *Rule) { sglang(r); r.Endpoints[1].BootstrapPort = 8998 }, combo, "endpoints[1].bootstrap_port"},
		{"bootstrap_port out of range", pdRule, func(r *Rule) { sglang(r); r.Endpoints[0].BootstrapPort = 70000 }, field, "endpoints[0].bootstrap_port"},
		{"label key with a space", pdRule, func(r *Rule) { r.Endpoints[0].Labels = map[string]string{"a b": "x"} }, field, "endpoints[0].labels.a b"},
		{"label value with a newline", pdRule, func(r *Rule) { r.Endpoints[0].Labels = map[string]string{"mode": "x\n"} }, field, "endpoints[0].labels.mode"},
		{"too many labels", pdRule, func(r *Rule) {
			r.Endpoints[0].Labels = map[string]string{}
			for i := range 17 {
				r.Endpoints[0].Labels[string(rune('a'+i))] = "v"
			}
		}, field, "endpoints[0].labels"},
		{"unspecified IPv4 endpoint", plainRule, func(r *Rule) { r.Endpoints[1].EndpointIP = "0.0.0.0" }, field, "endpoints[1].endpointIP"},
		{"unspecified IPv6 endpoint", plainRule, func(r *Rule) { v6VIP(r); r.Endpoints[0].EndpointIP = "::" }, field, "endpoints[0].endpointIP"},
		{"unspecified IPv6 endpoint bracketed", pdRule, func(r *Rule) { v6VIP(r); r.Endpoints[0].EndpointIP = "[::]" }, field, "endpoints[0].endpointIP"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.base()
			tc.mutate(&r)
			ae := wantAPIError(t, Validate(r), bad, tc.code, tc.field, "")
			if ae.Message == "" {
				t.Errorf("empty Message")
			}
		})
	}
}

// TestPairingMooncakeBootstrapPort: a vLLM Mooncake prefill names its own
// bootstrap server port (VLLM_MOONCAKE_BOOTSTRAP_PORT), as an SGLang one does.
func TestPairingMooncakeBootstrapPort(t *testing.T) {
	r := pdRule()
	r.Endpoints[0].KVConnector, r.Endpoints[0].BootstrapPort = "MooncakeConnector", 9001
	r.Endpoints[1].KVConnector = "MooncakeConnector"
	if err := Validate(r); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	c, err := Compile(r)
	if err != nil {
		t.Fatal(err)
	}
	if c.Endpoints[0].BootstrapPort != 9001 {
		t.Errorf("prefill bootstrap port = %d, want 9001", c.Endpoints[0].BootstrapPort)
	}
}

func TestPairingCompiles(t *testing.T) {
	r := pdRule()
	r.ServiceArguments.KVEngineType = "sglang"
	r.ServiceArguments.PDPairingMode = PairingStrict
	r.Endpoints[0].NixlPort = 0
	r.Endpoints[0].KVConnector, r.Endpoints[0].KVBlockSize, r.Endpoints[0].KVCacheDtype = "MooncakeConnector", 32, "fp8"
	r.Endpoints[0].BootstrapPort = 9100
	r.Endpoints[0].Labels = map[string]string{"moriio/mode": "read"}
	r.Endpoints[1].PairingProtocol = "mooncake"
	if err := Validate(r); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	c, err := Compile(r)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	if !c.PD.PairingStrict {
		t.Error("PD.PairingStrict = false for pd_pairing_mode strict")
	}
	p, d := c.Endpoints[0], c.Endpoints[1]
	wantP := map[string]string{spec.FactKVConnector: "MooncakeConnector", spec.FactBlockSize: "32", spec.FactKVCacheDtype: "fp8"}
	if !reflect.DeepEqual(p.PairFacts, wantP) || p.BootstrapPort != 9100 || p.Labels["moriio/mode"] != "read" {
		t.Errorf("prefill = facts %v port %d labels %v", p.PairFacts, p.BootstrapPort, p.Labels)
	}
	if !reflect.DeepEqual(d.PairFacts, map[string]string{spec.FactPairingProtocol: "mooncake"}) || d.BootstrapPort != 0 {
		t.Errorf("decode = facts %v port %d", d.PairFacts, d.BootstrapPort)
	}
	if k := spec.PairingKey(p.PairFacts); k != "block_size=32,kv_cache_dtype=fp8,kv_connector=MooncakeConnector" {
		t.Errorf("pairing key %q", k)
	}
	plain, err := Compile(pdRule())
	if err != nil {
		t.Fatal(err)
	}
	if plain.PD.PairingStrict || plain.Endpoints[0].PairFacts != nil {
		t.Errorf("undeclared rule: strict %v facts %v, want lenient and none", plain.PD.PairingStrict, plain.Endpoints[0].PairFacts)
	}
}
