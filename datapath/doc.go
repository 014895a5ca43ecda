// Package datapath serves compiled rules (spec.Rule) as a fullproxy HTTP/1.1
// gateway: one listener per VIP:port, shared by every rule on that address,
// routing each request to the most specific rule (host, path, model) and then
// to one endpoint of that rule's pool.
//
// Contract:
//   - Runtime implements rules.Runtime (Install/Remove) without importing
//     rules: the datapath sits below the rule store. Install either serves the
//     new rule or returns an *apierror.Error and leaves everything as it was.
//   - A rule's compiled view (endpoints, selector, per-endpoint state) is
//     swapped with an atomic pointer; requests load it once and finish on the
//     object they started with, so updates never drop a request.
//   - Per-endpoint health and breaker state live in endpoint objects keyed by
//     the endpoint ID ("ip:port") and are carried over by updates.
//   - A request that provably never reached an engine (dial failure, typed as
//     *DialError) is retried on another endpoint; anything that may have
//     reached an engine is never replayed (LLM requests are not idempotent).
//   - Every error a client sees is OpenAI-shaped JSON with a stable code that
//     is also sent in the X-Infergate-Error header.
//
// P/D rules are accepted and answered 501 pd_not_implemented until the P/D
// sequences (datapath/pd) plug into servePD; SendUpstream and SendLeg are
// the leg senders they will use (same connection pool, *DialError on connect
// failure).
package datapath
