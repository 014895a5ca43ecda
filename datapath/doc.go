// Package datapath serves compiled rules (spec.Rule) as a fullproxy HTTP/1.1
// gateway: one listener per VIP:port, shared by every rule on that address,
// routing each request to the most specific rule (host, path, model) and then
// to one endpoint of that rule's pool.
//
// Contract:
//   - Runtime implements store.Runtime (Install/Remove) without importing
//     rules: the datapath sits below the rule store. Install either serves the
//     new rule or returns an *apierror.Error and leaves everything as it was.
//   - A rule's compiled view (endpoints, selector, per-endpoint state) is
//     swapped with an atomic pointer; requests load it once and finish on the
//     object they started with, so updates never drop a request.
//   - Per-endpoint health and breaker state live in endpoint objects keyed by
//     the endpoint ID ("ip:port") and are carried over by updates.
//   - Every request to an engine goes through one upstream.Sender (the
//     datapath/upstream package: pooling, TLS legs, streamed bodies). A
//     request that provably never reached an engine (*upstream.DialError)
//     is retried on another endpoint; anything that may have reached an
//     engine is never replayed (LLM requests are not idempotent).
//   - Every error the gateway generates is OpenAI-shaped JSON with a stable
//     code that is also sent in the X-Infergate-Error header (clienterr).
//   - Single pools forward every path and method (surface.go); a body is
//     read only when a rule routes on it, else it streams to the engine
//     (upstream.BodyStream). Protocol upgrades are refused (501).
//
// P/D rules (servePD, pdserve.go): usable prefill and decode endpoints
// (healthy, breaker-selectable, weight > 0) go through the ladder (Tier 0
// sessions, Tier 1 prefix when cache-aware, Tier 1.5 KV-exact in mode 1,
// Tier 2 load); the rule's dialect (datapath/pd) runs the engine sequence
// over the rule's upstream.Sender; the Outcome feeds pd.Record, per-leg
// counters and the breakers. No usable pair: a role-0 endpoint serves unsplit, else 503
// pd_pool_unavailable. Side paths (tokenize, embeddings, models, …) and
// generation APIs the dialect does not split (pd.Dialect.Split) relay to
// one endpoint (pdRouteFor).
// Single pools add KV-exact mode 3 (first choice, a miss keeps sel) and
// CHWBL (sel 8/10). Explain is the side-effect-free dry run of all this.
package datapath
