// Package api is infergate's management REST API: LoxiLB's rule endpoints
// under /netlox/v1 (so loxicmd and existing automation work unchanged), plus
// /healthz, /readyz, /metrics and the OpenAPI document with its Swagger UI.
//
// Contract:
//   - Handlers are thin: decode the request, call the store.Store, render. All
//     rule semantics (validation, upsert, 409 on identical re-POST) live in
//     the rules package.
//   - Every failure a client can act on is an *apierror.Error created where
//     the problem is found; writeError is the single place that turns it into
//     HTTP (status, JSON body, Retry-After). Anything else is a 500 "internal"
//     that is logged, never echoed.
//   - Writes are refused with 503 + Retry-After while the store replays its
//     persisted rules at boot; reads and health endpoints always answer.
//   - Metrics are labelled by route template, never by raw path.
//   - Access control (api/auth) runs before the body limit and any handler:
//     access.go classes every route as probe (/healthz, /readyz), public
//     (Swagger UI and its document), read (GET, explain) or write, and the
//     Guard refuses with 401 unauthorized, 403 token_read_only or 403
//     host_not_allowed in the usual error envelope.
//
// The Server holds no mutable state of its own beyond what it was built with,
// so it is safe for concurrent use as long as the Store is.
package api
