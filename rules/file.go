package rules

// CONTRACT STUB (lead): the CLI helper implements this.

// Document is one rule read from a YAML rule file.
type Document struct {
	Source string // "path/file.yaml#2" (1-based document index)
	Rule   Rule
}

// LoadFiles reads one YAML file or every *.yaml/*.yml in a directory
// (sorted), each holding one or many `kind: Loadbalancer` documents in
// LoxiLB's loxicmd format, and returns the rules in order.
func LoadFiles(path string) ([]Document, error) { panic("rules: stub") }
