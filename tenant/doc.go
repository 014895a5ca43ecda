// Package tenant is the gateway's client-credential and quota plane: API keys
// that clients send to a VIP (X-Api-Key or Authorization: Bearer), each with a
// tenant, a model allow-list and request and token ceilings, plus per-tenant
// ceilings over all of a tenant's keys. It is LoxiLB's AI-gateway controls
// (/netlox/v1/config/ai/apikey, …/tenant/ratelimit) without LoxiLB's MySQL:
// records live in the state directory next to the rules.
//
// Keys. A key is "lxb_<id>_<secret>": the 16-hex-digit id names the record,
// so checking a presented key costs one map lookup and one SHA-256 of the
// secret with the record's salt, compared in constant time. Only the salt and
// the hash are stored; the raw key is returned once, by Create. An operator
// who keeps keys in Git (kind: ApiKey YAML) mints the key and its hash
// offline (Mint) and imports the hash, never the secret.
//
// Limits. Requests per second are a token bucket (rate_limit_rps refill,
// burst_size capacity). Tokens per minute are a bucket of tokens_per_min
// capacity refilled continuously: a request is admitted while the bucket is
// not empty, reserves an estimate (prompt bytes/4 plus max_tokens) at
// admission and settles the difference when the engine's usage is known, so
// concurrent long requests cannot overrun the budget by more than one
// request's reservation. Tenant ceilings apply on top of key ceilings; a
// request must pass both.
//
// Concurrency. Reads (the request path) load an immutable snapshot through
// an atomic pointer; every write builds a new snapshot under one mutex and
// persists it before publishing. Buckets are per key and per tenant, guarded
// by their own small mutex, and survive PATCHes of the record.
package tenant
