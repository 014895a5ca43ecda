// Package client is the Go client of infergate's LoxiLB-compatible
// management API (/netlox/v1). It is what the `infergate` CLI uses and what
// tests and tools should use instead of hand-built HTTP requests.
//
// Contract: every non-2xx answer becomes a *APIError carrying the server's
// status, stable error_code, field path, LoxiLB result text and message, so
// callers can print or branch on them without parsing strings. Apply turns
// LoxiLB's upsert (200 for both create and update, 409 rule_exists for an
// identical re-POST) into an explicit Created/Updated/Unchanged result.
package client
