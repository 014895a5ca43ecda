package datapath

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Wire names of the client-facing error format (OpenAI's) and our headers.
const (
	HeaderError     = "X-Infergate-Error" // carries the error code of every gateway error
	HeaderRequestID = "X-Request-Id"
	HeaderModel     = "X-Model"
	HeaderAllow     = "Allow"
)

// Stable error codes the datapath answers with. Clients and tests key off
// these; they never change once released.
const (
	CodeNoMatchingRule = "no_matching_rule" // 404: no rule on this VIP:port matches host/path/model
	// CodeUnknownPath and CodeMethodNotAllowed are retired (issue 14: every
	// path and method is forwarded, the engine answers); kept so the names
	// stay reserved.
	CodeUnknownPath        = "unknown_path"        // retired
	CodeMethodNotAllowed   = "method_not_allowed"  // retired
	CodeBodyTooLarge       = "body_too_large"      // 413: over MaxBodyBytes
	CodeInvalidJSON        = "invalid_json"        // 400: body had to be parsed for routing and is not JSON
	CodeBadRequestBody     = "bad_request_body"    // 400: the body could not be read
	CodeNoHealthyBackend   = "no_healthy_backend"  // 503: no usable endpoint
	CodeBackendUnreachable = "backend_unreachable" // 502: every dial failed
	CodeUpstreamError      = "upstream_error"      // 502: the engine connection broke after the request was sent
	CodeUpstreamTimeout    = "upstream_timeout"    // 504: the engine was silent beyond the idle timeout
	CodeInternal           = "internal_error"      // 500: recovered panic
	CodeStreamCapped       = "max_stream_duration_exceeded"
	CodeAdminDown          = "admin_down" // 503: the rule's adminStateUp is false (issue 12)

	// Edge hardening (issue 10).
	CodeInvalidPath = "invalid_path" // 400: dot segment, encoded slash or control byte in the path
	CodeOverloaded  = "overloaded"   // 503 + Retry-After: the in-flight body memory budget is full
)

// DialError marks a request that never reached the engine: the TCP connect
// failed, so nothing was written. Retry policy keys off this type only.
type DialError struct {
	Endpoint string
	Err      error
}

func (e *DialError) Error() string { return "dial " + e.Endpoint + ": " + e.Err.Error() }
func (e *DialError) Unwrap() error { return e.Err }

// NotSent reports that the request provably never reached the engine.
func (e *DialError) NotSent() bool { return true }

// errorType maps a status to OpenAI's error "type" field.
func errorType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status < 500:
		return "invalid_request_error"
	case status == http.StatusServiceUnavailable:
		return "service_unavailable_error"
	}
	return "server_error"
}

// writeError sends {"error":{"message","type","code"}} and the code header.
// It is the only place the datapath renders a client error.
func writeError(w http.ResponseWriter, status int, code, message string) {
	h := w.Header()
	h.Set(headerContentType, contentTypeJSON)
	h.Set(HeaderError, code)
	h.Del(headerContentLength)
	b := make([]byte, 0, 96+len(message))
	b = append(b, `{"error":{"message":`...)
	b = appendJSONString(b, message)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, errorType(status))
	b = append(b, `,"code":`...)
	b = appendJSONString(b, code)
	b = append(b, "}}\n"...)
	h.Set(headerContentLength, strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// appendJSONString appends s as a JSON string literal.
func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}
