// Package daemon wires the rule store, the datapath runtime and the
// management API into the running gateway (`infergate serve`).
//
// Boot order matters and is the contract of Run: the API listens first (so
// /healthz answers and writes get 503 + Retry-After), then the persisted rule
// set is replayed through full validation, then declarative rule files are
// applied. Only then does /readyz turn 200. Cancelling the context shuts the
// API down gracefully and closes the store and runtime.
package daemon
