package cli

import (
	"fmt"
	"strings"
	"testing"

	"github.com/infergate/infergate/rules"
)

// TestDemoRules: every demo rule passes the server's own validation and
// compile, with the roles, VIP and KV fields the demo prints and validate
// checks.
func TestDemoRules(t *testing.T) {
	tests := []struct {
		rule     string
		vip      string
		prefills int
		decodes  int
		kvMode   int
		kvBlock  int
	}{
		{rule: demoRule1P1D, vip: demoVIP1P1D, prefills: 1, decodes: 1},
		{rule: demoRuleCacheAware, vip: demoVIPCacheAware, prefills: 2, decodes: 2, kvMode: 1, kvBlock: 32},
	}
	specs := map[string]demoRuleSpec{}
	for _, rs := range demoRules() {
		specs[rs.name] = rs
	}
	for _, tc := range tests {
		t.Run(tc.rule, func(t *testing.T) {
			rs, ok := specs[tc.rule]
			if !ok {
				t.Fatalf("no demo rule %s", tc.rule)
			}
			var addrs []string
			for i, e := range rs.engines {
				addrs = append(addrs, fmt.Sprintf("%s:%d", e.ip, 40000+i))
			}
			r := demoRule(rs, 18080, addrs, 15557, 32)
			if err := rules.Validate(r); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			c, err := rules.Compile(r)
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			sa := r.ServiceArguments
			p, d := 0, 0
			for _, e := range r.Endpoints {
				switch e.EPRole {
				case epRolePrefill:
					p++
				case epRoleDecode:
					d++
				}
				if !strings.HasPrefix(e.EndpointIP, "127.0.0.") {
					t.Errorf("endpoint %s off loopback", e.EndpointIP)
				}
			}
			got := fmt.Sprintf("%s:%d %dP%dD kv=%d block=%d pd=%v", sa.ExternalIP, sa.Port, p, d, sa.KVExactMode, sa.KVBlockSize, c.PD != nil)
			want := fmt.Sprintf("%s:18080 %dP%dD kv=%d block=%d pd=true", tc.vip, tc.prefills, tc.decodes, tc.kvMode, map[bool]int{true: tc.kvBlock}[tc.kvMode > 0])
			if got != want {
				t.Errorf("got %s, want %s", got, want)
			}
		})
	}
}
