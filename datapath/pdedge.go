package datapath

import (
	"errors"
	"net/http"

	"github.com/infergate/infergate/datapath/pd"
)

// Client transfer state on P/D rules. Every path of a P/D rule (the
// dialect's legs, the role-0 fallback, the plain relay) goes through
// guardPDRequest first and sends only bodies that went through
// stripClientTransferState or a dialect's rewrite, so a client can never
// name an engine's KV peer or transfer object.

// Label values of infergate_pd_client_transfer_state_total.
const (
	actionRequestIDRejected = "request_id_rejected"
	actionFieldStripped     = "field_stripped"
)

// CodeRequestIDReserved is the 400 for a client X-Request-Id carrying
// vLLM's peer-address markers; a rule with a MoRI-IO endpoint answers
// SMG's CodeMoRIIORequestIDReserved instead (pd.RequestIDReservedCode).
const (
	CodeRequestIDReserved       = pd.CodeRequestIDReserved
	CodeMoRIIORequestIDReserved = pd.CodeMoRIIORequestIDReserved
)

// guardPDRequest answers 400 request_id_reserved (moriio_request_id_reserved
// on a MoRI-IO rule) when any X-Request-Id the
// client sent carries vLLM's ___prefill_addr_/___decode_addr_ markers, and
// otherwise leaves exactly one id (the datapath's) on the request, so no
// second header value can reach an engine. It reports whether to go on.
//
// Rejected rather than replaced: an id is the client's correlation key, and
// silently swapping it would break that without telling anyone; a 400 names
// the problem, and no legitimate client mints these ids.
func (rt *Runtime) guardPDRequest(x *exchange, c *compiled) bool {
	for _, id := range x.r.Header.Values(HeaderRequestID) {
		if pd.ReservedRequestID(id) {
			rt.pdm.ClientTransferState.WithLabelValues(c.label, actionRequestIDRejected).Inc()
			rt.fail(x, c, -1, http.StatusBadRequest, pd.RequestIDReservedCode(c.rule),
				"X-Request-Id must not contain ___prefill_addr_ or ___decode_addr_: the gateway sets P/D peer addresses")
			return false
		}
	}
	x.r.Header[HeaderRequestID] = []string{x.requestID}
	return true
}

// stripClientTransferState removes every engine's client transfer fields
// (each dialect's pd.Dialect.TransferFields: kv_transfer_params, the
// bootstrap triple, disaggregated_params) from a body the P/D rule forwards
// without a dialect (role-0 fallback, relay). A non-empty body that
// is not a JSON object is answered 400 pd_invalid_body, as on the split path:
// it cannot be shown free of transfer state. ok false: the client has been
// answered.
func (rt *Runtime) stripClientTransferState(x *exchange, c *compiled, body []byte) ([]byte, bool) {
	out, n, err := pd.StripClientTransferState(body)
	switch {
	case errors.Is(err, pd.ErrRequestIDReserved):
		rt.pdm.ClientTransferState.WithLabelValues(c.label, actionRequestIDRejected).Inc()
		rt.fail(x, c, -1, http.StatusBadRequest, pd.RequestIDReservedCode(c.rule), err.Error())
		return nil, false
	case err != nil:
		rt.fail(x, c, -1, http.StatusBadRequest, pd.CodeInvalidBody, "request body must be a JSON object")
		return nil, false
	}
	if n > 0 {
		rt.pdm.ClientTransferState.WithLabelValues(c.label, actionFieldStripped).Add(float64(n))
	}
	return out, true
}
