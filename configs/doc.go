// Package configs holds the example rule files (kind: Loadbalancer YAML).
// Every *.yaml here must load, validate and compile; every file in invalid/
// must fail with the status, error_code and field named in its first-line
// "# expect:" comment. configs_test.go enforces both, so the examples cannot
// rot as validation evolves.
package configs
