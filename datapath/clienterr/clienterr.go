// Package clienterr renders the errors infergate itself answers data-plane
// clients with: OpenAI's shape {"error":{"message","type","code"}}, the code
// also in the X-Infergate-Error header. The single-pool proxy and the P/D
// dialects both answer through Write, so one status always carries one
// error type whichever path refused the request. Engine errors are never
// rendered here: they are relayed as the engine sent them.
package clienterr

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Header carries the stable error code of every error infergate generates;
// clients, tests and dashboards key off it.
const Header = "X-Infergate-Error"

const contentTypeJSON = "application/json"

// Type maps a status to OpenAI's error "type" field.
func Type(status int) string {
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

// Append appends the error object (no trailing newline) to b: the body of
// Write, and the payload of an SSE error event.
func Append(b []byte, status int, code, message string) []byte {
	b = append(b, `{"error":{"message":`...)
	b = appendString(b, message)
	b = append(b, `,"type":`...)
	b = appendString(b, Type(status))
	b = append(b, `,"code":`...)
	b = appendString(b, code)
	return append(b, "}}"...)
}

// Write answers status with the error object and its code header. Headers
// already set on w (a request id, Retry-After, Connection: close) are kept;
// framing and content type are the error's.
func Write(w http.ResponseWriter, status int, code, message string) {
	h := w.Header()
	h.Set("Content-Type", contentTypeJSON)
	h.Set(Header, code)
	b := make([]byte, 0, 96+len(message))
	b = append(Append(b, status, code, message), '\n')
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// appendString appends s as a JSON string literal.
func appendString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}
