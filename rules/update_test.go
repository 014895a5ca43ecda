package rules

import (
	"testing"

	"github.com/infergate/infergate/apierror"
)

// Rows 29–33 on an existing key. Rows 29, 32 and 33 cannot be reached
// through Apply (secondaryIPs, security, egress and non-fullproxy modes are
// rejected by validation first), so CheckUpdate is tested directly.
func TestCheckUpdateRows(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(old, nr *Rule)
		status int
		code   string
		field  string
		result string
	}{
		{"row29 secondary IPs differ", func(_, nr *Rule) { nr.SecondaryIPs = []SecondaryIP{{"10.9.9.9"}} },
			409, apierror.CodeImmutableField, "secondaryIPs", "secIP modify error"},
		{"row30 engine differs", func(_, nr *Rule) { nr.ServiceArguments.KVEngineType = "trtllm" },
			409, apierror.CodeImmutableField, "serviceArguments.kvEngineType", "lbrule-exist error: cant modify rule kv engine type (delete and recreate)"},
		{"row30 empty equals vllm", func(old, nr *Rule) {
			old.ServiceArguments.KVEngineType = ""
			nr.ServiceArguments.KVEngineType = "vllm"
		},
			409, apierror.CodeRuleExists, "", "lbrule-exists error"},
		{"row31 nothing changed", func(_, _ *Rule) {},
			409, apierror.CodeRuleExists, "", "lbrule-exists error"},
		{"row32 security", func(_, nr *Rule) { nr.ServiceArguments.Security = 1 },
			409, apierror.CodeImmutableField, "serviceArguments.security", "lbrule-exist error: cant modify rule security mode"},
		{"row32 egress", func(_, nr *Rule) { nr.ServiceArguments.Egress = true },
			409, apierror.CodeImmutableField, "serviceArguments.egress", "lbrule-exist error: cant modify rule egress mode"},
		{"row33 fullproxy to fullnat", func(_, nr *Rule) { nr.ServiceArguments.Mode = 2 },
			409, apierror.CodeImmutableField, "serviceArguments.mode", "lbrule-exist error: cant modify fullproxy rule mode"},
		{"changed weight is an update", func(_, nr *Rule) { nr.Endpoints[0].Weight = 2 }, 0, "", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			old, nr := normalize(pdRule()), normalize(pdRule())
			tc.mutate(&old, &nr)
			err := CheckUpdate(old, nr)
			if tc.status == 0 {
				if err != nil {
					t.Fatalf("CheckUpdate: %v", err)
				}
				return
			}
			wantAPIError(t, err, tc.status, tc.code, tc.field, tc.result)
		})
	}
}
