// Package validate is the rollout workflow behind `infergate validate`: it
// checks one live rule end to end the way an operator would before sending
// it production traffic, and says what to look at when a check fails.
//
// The contract: every step ends PASS, WARN, FAIL or SKIP with its evidence
// (which endpoint answered, which metric moved by how much). A step whose
// precondition is absent (a KV step on a non-KV rule, a metric family this
// gateway does not export yet) is SKIP, never PASS. Proof that a role handled
// traffic comes from the gateway's own /metrics, scraped before and after the
// probes, not from the client's 200. A failing step names the likely causes
// from the diagnosis table (hints.go, docs/operations.md).
//
// The workflow talks to the management API (rule, /compiled, /status,
// /metrics, the KV inventory), to each endpoint directly (readiness) and to
// the VIP (probes). The disruptive steps drain one endpoint at a time by
// re-applying the rule with weight 0, then fail one at a time by
// re-applying it with the endpoint's port replaced by one that refuses
// connections (fail.go says why), and always restore the original rule on
// the way out, with a context that outlives the caller's cancellation.
package validate
