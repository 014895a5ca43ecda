package pdfake

import (
	"encoding/json"
	"net/http"
)

// vLLM NIXL kv_transfer_params fields.
const (
	kvDoRemoteDecode  = "do_remote_decode"
	kvDoRemotePrefill = "do_remote_prefill"
	kvRemoteEngineID  = "remote_engine_id"
	kvRemoteBlockIDs  = "remote_block_ids"
	kvRemoteHost      = "remote_host"
	kvRemotePort      = "remote_port"
	kvRemoteRequestID = "remote_request_id"
	kvTPSize          = "tp_size"
)

// vllmKV is the subset of kv_transfer_params the fake checks.
type vllmKV struct {
	DoRemoteDecode  *bool           `json:"do_remote_decode"`
	DoRemotePrefill *bool           `json:"do_remote_prefill"`
	RemoteEngineID  string          `json:"remote_engine_id"`
	RemoteBlockIDs  json.RawMessage `json:"remote_block_ids"`
}

// vllm answers like a vLLM server with the NIXL connector. A prefill that
// was asked to keep its blocks (do_remote_decode) returns the params a
// decode needs to pull them; a decode given params checks they came from a
// prefill. Soft problems (cap not 1) are recorded as violations but still
// answered, as vLLM would.
func (x *exchange) vllm() {
	if x.vllmConnector() {
		return
	}
	var kv *vllmKV
	if raw, ok := x.req[fieldKVTransferParams]; ok && string(raw) != "null" {
		kv = &vllmKV{}
		if err := json.Unmarshal(raw, kv); err != nil {
			x.reject(http.StatusBadRequest, "kv_transfer_params must be an object")
			return
		}
	}
	if x.e.cfg.Role == Prefill {
		switch {
		case kv == nil || kv.DoRemoteDecode == nil || !*kv.DoRemoteDecode:
			x.setViolation("prefill without kv_transfer_params.do_remote_decode=true")
		case x.stream():
			x.reject(http.StatusBadRequest, "prefill leg must not stream")
			return
		case x.responses() && string(x.req[fieldMaxOutputTokens]) != "1":
			x.setViolation("responses prefill max_output_tokens is not 1")
		case !x.responses() && string(x.req[fieldMaxTokens]) != "1" && string(x.req[fieldMaxCompletionTokens]) != "1":
			x.setViolation("prefill cap is not 1")
		case x.samples() > 1:
			x.setViolation("prefill with n > 1")
		}
		top := map[string]any{fieldKVTransferParams: map[string]any{
			kvDoRemotePrefill: true,
			kvDoRemoteDecode:  false,
			kvRemoteBlockIDs:  [][]int{{0, 1, 2, 3}},
			kvRemoteEngineID:  x.e.engineID,
			kvRemoteHost:      x.e.remoteHost(),
			kvRemotePort:      x.e.NixlPort(),
			kvRemoteRequestID: x.r.Header.Get(headerRequestID),
			kvTPSize:          1,
		}}
		x.answer("", "length", top, nil)
		return
	}
	if kv != nil && (kv.DoRemotePrefill == nil || !*kv.DoRemotePrefill || kv.RemoteEngineID == "" || len(kv.RemoteBlockIDs) == 0) {
		x.reject(http.StatusBadRequest, "decode kv_transfer_params do not come from a prefill")
		return
	}
	if kv != nil && x.samples() > 1 {
		// NIXL hands one prefill's blocks to one request: several samples
		// cannot consume them.
		x.reject(http.StatusBadRequest, "n > 1 with remote prefill: the KV transfer is single-consumer")
		return
	}
	x.answer("Hello from the fake vLLM decode, the answer is 42.", "stop", nil, nil)
}

// remoteHost is the NIXL host a decode should pull blocks from.
func (e *Engine) remoteHost() string {
	if h := e.host(); h != "" {
		return h
	}
	return "127.0.0.1"
}
