// Package api is infergate's management REST API: LoxiLB's rule endpoints
// under /netlox/v1 (so loxicmd and existing automation work unchanged), plus
// /healthz, /readyz, /metrics and the OpenAPI document with its Swagger UI.
//
// Contract:
//   - Handlers are thin: decode the request, call the rules.Store, render. All
//     rule semantics (validation, upsert, 409 on identical re-POST) live in
//     the rules package.
//   - Every failure a client can act on is an *apierror.Error created where
//     the problem is found; writeError is the single place that turns it into
//     HTTP (status, JSON body, Retry-After). Anything else is a 500 "internal"
//     that is logged, never echoed.
//   - Writes are refused with 503 + Retry-After while the store replays its
//     persisted rules at boot; reads and health endpoints always answer.
//   - Metrics are labelled by route template, never by raw path.
//
// The Server holds no mutable state of its own beyond what it was built with,
// so it is safe for concurrent use as long as the Store is.
package api
