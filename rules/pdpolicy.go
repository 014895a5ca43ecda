package rules

import (
	"github.com/infergate/infergate/apierror"
)

// Per-phase P/D policies: how each leg is chosen when no affinity tier
// (session, prefix, KV-exact) chose it. SMG runs one policy per leg
// (--prefill-policy, --decode-policy); these are the rule-level
// equivalents, infergate extensions. cache_aware is a prefill policy only:
// the prompt's KV is computed on the prefill, a decode receives it.

// Wire names.
const (
	fieldPDPrefillPolicy = "pd_prefill_policy"
	fieldPDDecodePolicy  = "pd_decode_policy"
)

// checkPDPolicies: the policies belong to P/D rules.
func checkPDPolicies(r *Rule) *apierror.Error {
	sa := &r.ServiceArguments
	if sa.PDDisaggMode {
		return nil
	}
	for _, f := range []struct{ name, v string }{{fieldPDPrefillPolicy, sa.PDPrefillPolicy}, {fieldPDDecodePolicy, sa.PDDecodePolicy}} {
		if f.v != "" {
			msg := f.name + " applies to prefill/decode rules (pd_disagg_mode)"
			return invalidCombo(saPath(f.name), msg, msg)
		}
	}
	return nil
}
