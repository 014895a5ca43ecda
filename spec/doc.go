// Package spec holds the compiled, immutable datapath objects a validated rule
// becomes. The rules package produces them (decode → default → validate →
// compile); the datapath consumes them. Every default is resolved here so the
// datapath never has to know LoxiLB's "0 means default" conventions.
//
// A *Rule is never mutated after Compile returns it: updating a rule compiles a
// new object and the datapath swaps the pointer atomically, so in-flight
// requests finish on the old one and the request path needs no config lock.
//
// It also holds the read-only views the datapath fills and the API serves
// (explain.go: the routing explanation and the KV-exact inventory rows), so
// the API renders them without importing the datapath.
package spec
