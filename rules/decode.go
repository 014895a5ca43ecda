package rules

// CONTRACT STUB (lead): the rules helper implements these.

import "github.com/infergate/infergate/datapath/spec"

// DecodeJSON decodes a rule body strictly: unknown or mis-cased keys are an
// apierror naming the key and suggesting the right spelling.
func DecodeJSON(body []byte) (Rule, error) { panic("rules: stub") }

// Validate runs field checks then the cross-field pass; the first failure is
// returned as an *apierror.Error with the field path.
func Validate(r Rule) error { panic("rules: stub") }

// Compile validates r and resolves every default into an immutable spec.Rule.
func Compile(r Rule) (*spec.Rule, error) { panic("rules: stub") }

// KeyOf returns the rule's composite key (validating only the key fields).
func KeyOf(r Rule) (spec.Key, error) { panic("rules: stub") }
