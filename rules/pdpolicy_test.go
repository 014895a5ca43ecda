package rules

import (
	"testing"

	"github.com/infergate/infergate/spec"
)

func TestPDPoliciesRejects(t *testing.T) {
	tests := []struct {
		name   string
		base   func() Rule
		mutate func(*Rule)
		code   string
		field  string
	}{
		{"unknown prefill policy", pdRule, func(r *Rule) { r.ServiceArguments.PDPrefillPolicy = "fastest" }, "invalid_field", "serviceArguments.pd_prefill_policy"},
		{"cache_aware decode", pdRule, func(r *Rule) { r.ServiceArguments.PDDecodePolicy = "cache_aware" }, "invalid_field", "serviceArguments.pd_decode_policy"},
		{"prefill policy without P/D", plainRule, func(r *Rule) { r.ServiceArguments.PDPrefillPolicy = "round_robin" }, "invalid_combination", "serviceArguments.pd_prefill_policy"},
		{"decode policy without P/D", plainRule, func(r *Rule) { r.ServiceArguments.PDDecodePolicy = "power_of_two" }, "invalid_combination", "serviceArguments.pd_decode_policy"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.base()
			tc.mutate(&r)
			wantAPIError(t, Validate(r), 400, tc.code, tc.field, "")
		})
	}
}

func TestPDPoliciesCompile(t *testing.T) {
	tests := []struct {
		prefill, decode string
		want            spec.PD // the policy fields and CacheAware
	}{
		{"", "", spec.PD{}},
		{"round_robin", "power_of_two", spec.PD{PrefillPolicy: spec.PolicyRoundRobin, DecodePolicy: spec.PolicyPowerOfTwo}},
		{"cache_aware", "least_load", spec.PD{CacheAware: true, PrefillPolicy: spec.PolicyCacheAware, DecodePolicy: spec.PolicyLeastLoad}},
	}
	for _, tc := range tests {
		r := pdRule()
		r.ServiceArguments.PDCacheAwareMode = false
		r.ServiceArguments.PDPrefillPolicy, r.ServiceArguments.PDDecodePolicy = tc.prefill, tc.decode
		if err := Validate(r); err != nil {
			t.Fatalf("%s/%s: Validate: %v", tc.prefill, tc.decode, err)
		}
		c, err := Compile(r)
		if err != nil {
			t.Fatal(err)
		}
		got := spec.PD{CacheAware: c.PD.CacheAware, PrefillPolicy: c.PD.PrefillPolicy, DecodePolicy: c.PD.DecodePolicy}
		if got != tc.want {
			t.Errorf("%s/%s: compiled %+v, want %+v", tc.prefill, tc.decode, got, tc.want)
		}
	}
}
