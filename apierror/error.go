// Package apierror defines the one error type every layer of infergate returns
// for a problem a client can act on. It is created where the problem is found
// (decoding, validation, the store, the datapath) and mapped to HTTP once, at
// the API edge, so status codes never depend on matching error strings.
package apierror

import (
	"errors"
	"fmt"
	"net/http"
)

// Stable machine-readable codes. Clients and tests key off these, never off
// the human-readable message, so they must not change once released.
const (
	CodeMalformedJSON  = "malformed_json"      // body is not JSON / wrong JSON type for a field
	CodeUnknownField   = "unknown_field"       // key not in the model in any letter case
	CodeInvalidField   = "invalid_field"       // a single field is out of range / bad format
	CodeInvalidCombo   = "invalid_combination" // fields that are valid alone conflict (cross-field rules)
	CodeUnsupported    = "unsupported"         // a LoxiLB feature infergate deliberately does not serve
	CodeRuleExists     = "rule_exists"         // identical re-POST
	CodeImmutableField = "immutable_field"     // change of a field that cannot be updated in place
	CodeRuleNotFound   = "rule_not_found"
	CodeBindFailed     = "bind_failed"    // the VIP:port cannot be served on this host
	CodeNotReady       = "not_ready"      // boot replay still running
	CodePersistFailed  = "persist_failed" // durable write failed; change rolled back
	CodeInternal       = "internal"

	// Edge hardening.
	CodeUnspecifiedVIP = "unspecified_vip" // externalIP 0.0.0.0 / :: without the daemon's opt-in
)

// Codes of the shared (etcd) rule store.
const (
	CodeRevisionConflict = "revision_conflict" // the rule changed through another replica since it was read
	CodeStoreUnavailable = "store_unavailable" // the shared store cannot be reached; retry later
)

// Error is a client-facing failure. Status is the HTTP status, Code the stable
// machine code, Field the offending field path (e.g. "endpoints[2].nixl_port"),
// Result LoxiLB's error text (kept for wire compatibility) and Message a
// sentence a person can act on.
type Error struct {
	Status  int
	Code    string
	Field   string
	Result  string
	Message string
	// Err is an optional underlying cause (not shown to clients).
	Err error
}

func (e *Error) Error() string {
	msg := e.Message
	if msg == "" {
		msg = e.Result
	}
	if e.Field != "" {
		msg = e.Field + ": " + msg
	}
	if e.Err != nil {
		return fmt.Sprintf("%s (%s): %v", msg, e.Code, e.Err)
	}
	return fmt.Sprintf("%s (%s)", msg, e.Code)
}

func (e *Error) Unwrap() error { return e.Err }

// New builds an Error. result is LoxiLB's error text (empty when LoxiLB has no
// equivalent; Message is then used as result on the wire).
func New(status int, code, field, result, message string) *Error {
	return &Error{Status: status, Code: code, Field: field, Result: result, Message: message}
}

// BadRequest is a 400 for invalid input.
func BadRequest(code, field, result, message string) *Error {
	return New(http.StatusBadRequest, code, field, result, message)
}

// Conflict is a 409 for rule-exists and immutable-field failures.
func Conflict(code, field, result, message string) *Error {
	return New(http.StatusConflict, code, field, result, message)
}

// NotFound is a 404.
func NotFound(code, result, message string) *Error {
	return New(http.StatusNotFound, code, "", result, message)
}

// As returns the *Error in err's chain, if any.
func As(err error) (*Error, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e, true
	}
	return nil, false
}

// --- LoxiLB compatibility ---

// CodeVIPConflict: a rule's address (VIP or secondary VIP) with its route
// (host, path, model, block) is already served by another rule.
const CodeVIPConflict = "vip_conflict"

// CodeEndpointIsGateway: an endpoint is one of the gateway's own addresses
// (a VIP:port it serves, or its management API): every request would come
// back to the gateway, hop after hop, until its connections ran out.
const CodeEndpointIsGateway = "endpoint_is_gateway"
