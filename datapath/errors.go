package datapath

import "github.com/infergate/infergate/datapath/clienterr"

// Wire names of the client-facing error format (OpenAI's) and our headers.
const (
	HeaderError     = clienterr.Header // carries the error code of every gateway error
	HeaderRequestID = "X-Request-Id"
	HeaderModel     = "X-Model"
	HeaderAllow     = "Allow"
)

// Stable error codes the datapath answers with. Clients and tests key off
// these; they never change once released.
const (
	CodeNoMatchingRule = "no_matching_rule" // 404: no rule on this VIP:port matches host/path/model
	// CodeUnknownPath and CodeMethodNotAllowed are retired (every
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
	CodeAdminDown          = "admin_down" // 503: the rule's adminStateUp is false

	// Edge hardening.
	CodeInvalidPath = "invalid_path" // 400: dot segment, encoded slash or control byte in the path
	CodeOverloaded  = "overloaded"   // 503 + Retry-After: the in-flight body memory budget is full

	// CodeMisdirected (421): the rule the request matched is not served by
	// the TLS site (certificate, client-certificate policy) its handshake
	// chose by SNI; the client should connect again with the rule's name.
	CodeMisdirected = "misdirected_request"
)
