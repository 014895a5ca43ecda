package rules

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/infergate/infergate/spec"
)

func TestCompileDefaults(t *testing.T) {
	tests := []struct {
		name   string
		base   func() Rule
		mutate func(*Rule)
		check  func(t *testing.T, c *spec.Rule)
	}{
		{"vllm pd kv1 defaults", pdRule, func(*Rule) {}, func(t *testing.T, c *spec.Rule) {
			wantPD := &spec.PD{CacheAware: true, SessionTTL: 300 * time.Second, CacheThreshold: 20, BalanceAbsThreshold: 3}
			if !reflect.DeepEqual(c.PD, wantPD) {
				t.Errorf("PD = %+v, want %+v", c.PD, wantPD)
			}
			wantKV := &spec.KV{Mode: 1, ZMQPort: 5557, BlockSize: 16, HashAlgo: "sha256_cbor", DPRanks: 1}
			if !reflect.DeepEqual(c.KV, wantKV) {
				t.Errorf("KV = %+v, want %+v", c.KV, wantKV)
			}
			if c.Engine != spec.EngineVLLM || !c.CircuitBreaker || !c.SSE || c.CHWBL != nil {
				t.Errorf("engine %q cb %v sse %v chwbl %v", c.Engine, c.CircuitBreaker, c.SSE, c.CHWBL)
			}
			if c.Endpoints[0].NixlPort != 9001 || c.Endpoints[1].NixlPort != 8000 {
				t.Errorf("nixl ports %d %d, want 9001 and targetPort 8000", c.Endpoints[0].NixlPort, c.Endpoints[1].NixlPort)
			}
			if c.Endpoints[0].Role != spec.RolePrefill || c.Endpoints[1].Role != spec.RoleDecode {
				t.Errorf("roles %v %v", c.Endpoints[0].Role, c.Endpoints[1].Role)
			}
		}},
		{"sglang pd bootstrap default and hash", pdRule, func(r *Rule) {
			r.ServiceArguments.KVEngineType = "sglang"
			r.ServiceArguments.PDCacheThreshold = 50
			r.ServiceArguments.PDSessionTTLSec = 60
			r.Endpoints[0].NixlPort = 0
		}, func(t *testing.T, c *spec.Rule) {
			if c.PD.BootstrapPort != 8998 || c.PD.CacheThreshold != 50 || c.PD.SessionTTL != time.Minute {
				t.Errorf("PD = %+v", c.PD)
			}
			if c.KV.HashAlgo != "sha256_sglang" || c.Endpoints[0].NixlPort != 0 {
				t.Errorf("hash %q nixl %d", c.KV.HashAlgo, c.Endpoints[0].NixlPort)
			}
		}},
		{"trtllm kv3 hash and block size", plainRule, func(r *Rule) {
			r.ServiceArguments.KVEngineType = "trtllm"
			r.ServiceArguments.KVExactMode = 3
			r.ServiceArguments.KVBlockSize = 32
		}, func(t *testing.T, c *spec.Rule) {
			if c.PD != nil || c.KV.HashAlgo != "blockhash_trtllm" || c.KV.BlockSize != 32 || c.KV.Mode != 3 || c.CircuitBreaker {
				t.Errorf("PD %+v KV %+v cb %v", c.PD, c.KV, c.CircuitBreaker)
			}
		}},
		{"plain defaults", plainRule, func(*Rule) {}, func(t *testing.T, c *spec.Rule) {
			want := spec.Probe{Type: "none", Timeout: 2 * time.Second, Retries: 2}
			if c.Probe != want || c.PD != nil || c.KV != nil || c.Engine != spec.EngineVLLM {
				t.Errorf("probe %+v pd %v kv %v engine %q", c.Probe, c.PD, c.KV, c.Engine)
			}
			if c.IdleTimeout != 240*time.Second || c.Session.Source != spec.SessionFromSourceIP {
				t.Errorf("idle %v session %+v", c.IdleTimeout, c.Session)
			}
			if c.Key.PathMatchMode != "" || c.Key.VIP != netip.MustParseAddr("10.0.0.10") || c.Key.Port != 2020 {
				t.Errorf("key %+v", c.Key)
			}
		}},
		{"http probe defaults", plainRule, func(r *Rule) {
			r.ServiceArguments.ProbeType = "http"
			r.ServiceArguments.ProbeTimeout = 5
		}, func(t *testing.T, c *spec.Rule) {
			want := spec.Probe{Type: "http", Request: "/health", Timeout: 5 * time.Second, Retries: 2}
			if c.Probe != want {
				t.Errorf("probe %+v, want %+v", c.Probe, want)
			}
		}},
		{"monitor without probetype is tcp", plainRule, func(r *Rule) { r.ServiceArguments.Monitor = true }, func(t *testing.T, c *spec.Rule) {
			if c.Probe.Type != "tcp" {
				t.Errorf("probe type %q", c.Probe.Type)
			}
		}},
		{"sessions", plainRule, func(r *Rule) { r.ServiceArguments.Sel = 3; r.ServiceArguments.SessionHeaderName = "cookie:sid" }, func(t *testing.T, c *spec.Rule) {
			if c.Session != (spec.SessionKey{Source: spec.SessionFromCookie, Name: "sid"}) || c.Selector != spec.SelPersist {
				t.Errorf("session %+v sel %v", c.Session, c.Selector)
			}
		}},
		{"chwbl defaults", plainRule, func(r *Rule) { r.ServiceArguments.Sel = 8 }, func(t *testing.T, c *spec.Rule) {
			want := &spec.CHWBL{PrefixHashLevel: 1, MeanLoadFactor: 175, Replication: 100}
			if !reflect.DeepEqual(c.CHWBL, want) || c.Selector != spec.SelCHWBL {
				t.Errorf("CHWBL = %+v sel %v, want %+v", c.CHWBL, c.Selector, want)
			}
		}},
		{"weighted chwbl explicit knobs", plainRule, func(r *Rule) {
			sa := &r.ServiceArguments
			lvl, flags, salt := 3, 0x21, true
			sa.Sel, sa.CHWBLPrefixHashLevel, sa.CHWBLPrefixHashFlags, sa.CHWBLEnableCacheSalt = 10, &lvl, &flags, &salt
			sa.CHWBLMeanLoadFactor, sa.CHWBLReplication = 300, 1
		}, func(t *testing.T, c *spec.Rule) {
			want := &spec.CHWBL{PrefixHashLevel: 3, PrefixHashFlags: 0x21, MeanLoadFactor: 300, Replication: 1, CacheSalt: true}
			if !reflect.DeepEqual(c.CHWBL, want) || c.Selector != spec.SelWeightedCHWBL {
				t.Errorf("CHWBL = %+v sel %v, want %+v", c.CHWBL, c.Selector, want)
			}
		}},
		{"no chwbl on other selectors", plainRule, func(r *Rule) { r.ServiceArguments.Sel = 4 }, func(t *testing.T, c *spec.Rule) {
			if c.CHWBL != nil {
				t.Errorf("CHWBL = %+v on sel 4", c.CHWBL)
			}
		}},
		{"ipv6 ids and request order", plainRule, func(r *Rule) {
			r.ServiceArguments.ExternalIP = "[2001:db8::10]"
			r.Endpoints = []Endpoint{{EndpointIP: "[2001:db8::9]", TargetPort: 8000, Weight: 3}, {EndpointIP: "2001:db8::1", TargetPort: 8001}}
			r.ServiceArguments.PathMatchMode = "disabled"
		}, func(t *testing.T, c *spec.Rule) {
			if c.Endpoints[0].ID != "[2001:db8::9]:8000" || c.Endpoints[1].ID != "[2001:db8::1]:8001" || c.Endpoints[0].Weight != 3 {
				t.Errorf("endpoints %+v", c.Endpoints)
			}
			if c.Key.VIP != netip.MustParseAddr("2001:db8::10") || c.Key.PathMatchMode != "" {
				t.Errorf("key %+v", c.Key)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.base()
			tc.mutate(&r)
			c, err := Compile(r)
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			if c.Generation != 0 {
				t.Errorf("Compile stamped generation %d", c.Generation)
			}
			tc.check(t, c)
		})
	}
}

func TestKeyOfUnmapsVIP(t *testing.T) {
	r := plainRule()
	r.ServiceArguments.ExternalIP = "::ffff:10.0.0.10"
	k, err := KeyOf(r)
	if err != nil {
		t.Fatal(err)
	}
	if k.VIP != netip.MustParseAddr("10.0.0.10") {
		t.Errorf("VIP %v not unmapped", k.VIP)
	}
}

func TestKeyOf(t *testing.T) {
	r := plainRule()
	r.ServiceArguments.ExternalIP = "[::1]"
	r.ServiceArguments.PathPrefix, r.ServiceArguments.PathMatchMode = "/v1", "exact"
	r.ServiceArguments.ModelName, r.ServiceArguments.Host, r.ServiceArguments.Block = "m", "h", 7
	r.Endpoints = nil // KeyOf checks only key fields
	k, err := KeyOf(r)
	if err != nil {
		t.Fatal(err)
	}
	want := spec.Key{VIP: netip.MustParseAddr("::1"), Port: 2020, Protocol: "tcp", Block: 7, Host: "h",
		PathPrefix: "/v1", PathMatchMode: "exact", ModelName: "m"}
	if k != want {
		t.Errorf("KeyOf = %+v, want %+v", k, want)
	}
	r.ServiceArguments.ExternalIP = "nope"
	_, err = KeyOf(r)
	wantAPIError(t, err, 400, "invalid_field", "serviceArguments.externalIP", "malformed-service error")
}

// Two bodies that mean the same thing compare equal once defaults resolve.
func TestEffectiveEquivalence(t *testing.T) {
	a := pdRule()
	b := pdRule()
	b.ServiceArguments.PDCacheThreshold = 20
	b.ServiceArguments.KVEngineType = "vllm"
	b.ServiceArguments.KVZmqPort = 5557
	b.ServiceArguments.KVHashAlgo = "sha256_cbor"
	b.ServiceArguments.CBEnable = true
	b.ServiceArguments.PathMatchMode = "disabled"
	b.Endpoints[1].NixlPort = 8000
	if !reflect.DeepEqual(effective(a), effective(b)) {
		t.Errorf("equivalent rules differ:\n%+v\n%+v", effective(a), effective(b))
	}
	b.ServiceArguments.PDCacheThreshold = 21
	if reflect.DeepEqual(effective(a), effective(b)) {
		t.Error("a changed threshold compares equal")
	}
}
