package rules

// Effective is r with every default resolved into the wire form: two rules
// the store would call identical (its 409 rule_exists) have equal Effective
// forms. Clients use it to say what an upsert would change (`infergate
// diff`, `create lb --dry-run`) by the same notion of "same" the store uses.
func Effective(r Rule) Rule { return effective(r) }
