package rules

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"

	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/spec"
)

// What a rule may become, and what it may share with other rules. These are
// properties of rules, so they live here; the rule store (rules/store) asks
// them under its lock, against the rule set it holds.

// ResultRuleExists is LoxiLB's result text when a key already holds the
// rule (an identical re-POST, a duplicate, a concurrent change).
const ResultRuleExists = "lbrule-exists error"

// Result texts LoxiLB returns when an existing key is re-posted (reference
// §3.1).
const (
	resultEngineChange   = "lbrule-exist error: cant modify rule kv engine type (delete and recreate)"
	resultSecurityChange = "lbrule-exist error: cant modify rule security mode"
	resultEgressChange   = "lbrule-exist error: cant modify rule egress mode"
	resultModeChange     = "lbrule-exist error: cant modify fullproxy rule mode"
	resultSecIPChange    = "secIP modify error"
)

// Prepare validates r and returns its stored form (normalised: defaults
// that do not change meaning are spelt out, so equal rules compare equal)
// and the compiled rule built from that form, so Compiled.Endpoints[i] is
// the stored Endpoints[i]. A validation failure is an *apierror.Error.
func Prepare(r Rule) (Rule, *spec.Rule, error) {
	if err := Validate(r); err != nil {
		return Rule{}, nil, err
	}
	nr := normalize(r)
	return nr, compileValid(&nr), nil
}

// CheckUpdate applies LoxiLB's existing-key rows 29–33, in LoxiLB's order,
// to a rule stored as old and re-posted as next (both prepared): an
// identical rule is 409 rule_exists, and the fields LoxiLB cannot change
// in place are 409 immutable_field.
func CheckUpdate(old, next Rule) error {
	o, n := &old.ServiceArguments, &next.ServiceArguments
	switch {
	case !slices.Equal(old.SecondaryIPs, next.SecondaryIPs):
		return apierror.Conflict(apierror.CodeImmutableField, fieldSecondaryIPs, resultSecIPChange,
			"secondaryIPs cannot change on an existing rule")
	case engineOf(o) != engineOf(n):
		return apierror.Conflict(apierror.CodeImmutableField, saPath(fieldKVEngineType), resultEngineChange,
			fmt.Sprintf("kvEngineType cannot change from %q to %q; delete and recreate the rule", engineOf(o), engineOf(n)))
	case reflect.DeepEqual(effective(old), effective(next)):
		return apierror.Conflict(apierror.CodeRuleExists, "", ResultRuleExists,
			"an identical rule already exists for this key")
	case o.Security != n.Security:
		return apierror.Conflict(apierror.CodeImmutableField, saPath(fieldSecurity), resultSecurityChange, "security cannot change on an existing rule")
	case o.Egress != n.Egress:
		return apierror.Conflict(apierror.CodeImmutableField, saPath(fieldEgress), resultEgressChange, "egress cannot change on an existing rule")
	case (o.Mode == modeFullProxy) != (n.Mode == modeFullProxy):
		return apierror.Conflict(apierror.CodeImmutableField, saPath(fieldMode), resultModeChange, "a fullproxy rule cannot change mode")
	}
	return nil
}

// servedKeys are the route keys a rule answers on: its own key and the same
// key on each secondary VIP. Two rules must never share one, or a request
// could not tell which rule it is for.
func servedKeys(r *spec.Rule) []spec.Key {
	out := []spec.Key{r.Key}
	for _, a := range r.SecondaryVIPs {
		k := r.Key
		k.VIP = a
		out = append(out, k)
	}
	return out
}

// CheckCollision refuses next when one of its addresses, with its route,
// is served by other (another rule of the set) — the collision rule
// externalIP already obeys (one key, one rule), extended to secondary VIPs.
// A rule does not collide with a version of itself.
func CheckCollision(next, other *spec.Rule) error {
	if other == nil || other.Key == next.Key {
		return nil
	}
	mine := servedKeys(next)
	for _, theirs := range servedKeys(other) {
		for i, k := range mine {
			if k != theirs {
				continue
			}
			field := saPath(fieldExternalIP)
			if i > 0 {
				field = fmt.Sprintf("%s[%d].%s", fieldSecondaryVIPs, i-1, fieldAddress)
			}
			msg := fmt.Sprintf("%s is already served by rule %s", netip.AddrPortFrom(k.VIP, k.Port), other.Key)
			return apierror.Conflict(apierror.CodeVIPConflict, field, msg, msg)
		}
	}
	return nil
}

// Redacted is a deep copy of r that a caller may change in place, with the
// TLS objects copied and inline private keys hidden: what a read of the
// rule set hands out.
func Redacted(r Rule) Rule {
	r.Endpoints = slices.Clone(r.Endpoints)
	r.SecondaryIPs = slices.Clone(r.SecondaryIPs)
	r.AllowedSources = slices.Clone(r.AllowedSources)
	sa := &r.ServiceArguments
	sa.CHWBLPrefixHashLevel = clonePtr(sa.CHWBLPrefixHashLevel)
	sa.CHWBLPrefixHashFlags = clonePtr(sa.CHWBLPrefixHashFlags)
	sa.CHWBLEnableCacheSalt = clonePtr(sa.CHWBLEnableCacheSalt)
	redactTLS(sa)
	if r.Status != nil {
		st := *r.Status
		r.Status = &st
	}
	return r
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// ParseVIP reads the address part of a rule key as a lookup gives it: an
// IP literal, else 400 invalid_field on externalIP.
func ParseVIP(vip string) (netip.Addr, error) {
	a, ok := ParseIPLiteral(vip)
	if !ok {
		return netip.Addr{}, invalidField(fieldExternalIP, "malformed-service error",
			fmt.Sprintf("%q is not an IP address", vip))
	}
	return a, nil
}
