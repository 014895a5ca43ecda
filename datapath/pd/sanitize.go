package pd

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"

	"github.com/infergate/infergate/spec"
)

// Client transfer state: what engines read to steer a KV transfer. On a
// P/D rule the gateway alone decides these, on every path (the dialects'
// legs, the role-0 fallback, the plain relay), so a client can never point
// an engine at a peer address or a foreign KV block set.

// CodeRequestIDReserved is the 400 answered to a client request id that
// carries vLLM's peer-address markers.
const CodeRequestIDReserved = "request_id_reserved"

// CodeMoRIIORequestIDReserved is SMG's code for the same refusal: SMG
// checks request ids on MoRI-IO pairs only (that connector reads its peer
// from the markers), infergate on every P/D rule because vLLM's P2P
// connectors read them too. A rule with a MoRIIOConnector endpoint answers
// SMG's code, so a client moved from SMG sees the code it knows; other
// rules answer CodeRequestIDReserved (RequestIDReservedCode).
const CodeMoRIIORequestIDReserved = "moriio_request_id_reserved"

// RequestIDReservedCode is the code of a marker request id refused on rule
// r: SMG's MoRI-IO code when any endpoint declares MoRIIOConnector, else
// CodeRequestIDReserved. Only refusals ask, so the scan costs nothing on
// the request path.
func RequestIDReservedCode(r *spec.Rule) string {
	if HasMoRIIOEndpoint(r) {
		return CodeMoRIIORequestIDReserved
	}
	return CodeRequestIDReserved
}

// IsRequestIDReserved reports whether code is a marker request id refusal
// (either spelling of RequestIDReservedCode).
func IsRequestIDReserved(code string) bool {
	return code == CodeRequestIDReserved || code == CodeMoRIIORequestIDReserved
}

// msgRequestIDReserved is the message of every request_id_reserved answer.
const msgRequestIDReserved = "request ids must not contain ___prefill_addr_ or ___decode_addr_: the gateway sets P/D peer addresses"

// fieldRequestID is vLLM's body request id; the X-Request-Id header, which
// the gateway always sends, takes precedence in vLLM, but a body id with
// markers is refused all the same rather than trusted to stay unused.
const fieldRequestID = "request_id"

// ErrRequestIDReserved is StripClientTransferState's error for a body whose
// request_id carries vLLM's peer markers.
var ErrRequestIDReserved = errors.New(msgRequestIDReserved)

// Markers vLLM's P2P connectors parse out of a request id to find the peer
// engines ("___prefill_addr_<ip:port>___decode_addr_<ip:port>_<id>").
const (
	markerPrefillAddr = "___prefill_addr_"
	markerDecodeAddr  = "___decode_addr_"
)

// transferFields are the top-level body fields a client may never set on a
// P/D rule: every registered dialect's TransferFields (vLLM's
// kv_transfer_params, SGLang's bootstrap triple, TensorRT-LLM's
// disaggregated_params). All engines' fields are stripped whatever the
// rule's engine, so a body is safe on any fleet. Read-only after package
// initialisation.
var transferFields = func() []string {
	engines := make([]spec.Engine, 0, len(dialects))
	for e := range dialects {
		engines = append(engines, e)
	}
	slices.Sort(engines) // a stable order for a stable scan
	var fields []string
	for _, e := range engines {
		for _, f := range dialects[e](Options{}).TransferFields() {
			if !slices.Contains(fields, f) {
				fields = append(fields, f)
			}
		}
	}
	return fields
}()

// ReservedRequestID reports whether a client request id carries vLLM's
// peer-address markers. Matching is case-insensitive: no legitimate id
// looks like this, and a near-miss spelling is not worth the doubt.
func ReservedRequestID(id string) bool {
	if !strings.Contains(id, "___") {
		return false // the common case: no lowering, no allocation
	}
	l := strings.ToLower(id)
	return strings.Contains(l, markerPrefillAddr) || strings.Contains(l, markerDecodeAddr)
}

// StripClientTransferState returns body without any client transfer field
// (every occurrence, escaped key spellings included) and how many members
// it removed. An empty body is returned as is; a body request_id with
// vLLM's peer markers is ErrRequestIDReserved. A body that is not a JSON
// object is an error: it cannot be proven free of transfer state (engines'
// JSON parsers accept more than RFC 8259), so it is never forwarded. When
// nothing is removed the original slice is returned.
func StripClientTransferState(body []byte) ([]byte, int, error) {
	if len(body) == 0 {
		return body, 0, nil
	}
	obj, err := parseObject(body)
	if err != nil {
		return nil, 0, err
	}
	if obj.reservedRequestID() {
		return nil, 0, ErrRequestIDReserved
	}
	n := obj.countTransferFields()
	if n == 0 {
		return body, 0, nil
	}
	return obj.applyOwn(nil), n, nil
}

// countTransferFields counts the client transfer fields among the members.
func (o *object) countTransferFields() int {
	n := 0
	for i := range o.members {
		if o.isTransferField(&o.members[i]) {
			n++
		}
	}
	return n
}

// isTransferField reports whether member m is a client transfer field.
func (o *object) isTransferField(m *member) bool {
	for _, f := range transferFields {
		if o.keyIs(m, f) {
			return true
		}
	}
	return false
}

// reservedRequestID reports whether the body's top-level request_id (the
// last one, as engines decode it; any occurrence counts) is a string with
// vLLM's peer markers.
func (o *object) reservedRequestID() bool {
	for i := range o.members {
		m := &o.members[i]
		if !o.keyIs(m, fieldRequestID) {
			continue
		}
		var id string
		if json.Unmarshal(o.raw[m.valStart:m.valEnd], &id) == nil && ReservedRequestID(id) {
			return true
		}
	}
	return false
}
