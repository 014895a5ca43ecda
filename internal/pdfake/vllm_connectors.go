package pdfake

import (
	"encoding/json"
	"net"
	"net/http"
	"strconv"
)

// vLLM's KV connectors as the engines speak them on the HTTP legs:
//   - NixlConnector (the default, vllm.go): the prefill returns the handoff.
//   - MooncakeConnector: the prefill keeps its KV under the proxy's
//     transfer_id and returns no handoff; the prefill runs a bootstrap
//     server (VLLM_MOONCAKE_BOOTSTRAP_PORT) whose GET /query lists its
//     engine ids per DP rank; the decode is told the transfer id, the
//     prefill's engine id and the bootstrap address, and asks /query.
//   - MoRIIOConnector: the prefill returns a handoff naming its side
//     channel (remote_host, remote_handshake_port, remote_notify_port) and
//     echoing the transfer_id; in WRITE mode the prefill leg names the
//     decode's side channel. The decode never recomputes: a decode leg
//     without a handoff is a violation (the real engine would answer over
//     KV that never arrived, or wait for a push forever).

// Connector names (Config.Connector).
const (
	ConnectorNIXL     = "NixlConnector"
	ConnectorMooncake = "MooncakeConnector"
	ConnectorMoRIIO   = "MoRIIOConnector"
)

// MoRI-IO's side-channel ports the fake reports (the engine defaults).
const (
	moriHandshakePort = 6301
	moriNotifyPort    = 61005
)

// kv_transfer_params fields of the Mooncake and MoRI-IO legs.
const (
	fieldIgnoreEOS        = "ignore_eos"
	kvTransferID          = "transfer_id"
	kvRemoteBootstrapAddr = "remote_bootstrap_addr"
	kvRemoteHandshakePort = "remote_handshake_port"
	kvRemoteNotifyPort    = "remote_notify_port"
	kvRemoteDPSize        = "remote_dp_size"
)

// connectorKV is the subset of the Mooncake and MoRI-IO params the fake
// checks: NIXL's fields and the connectors' own.
type connectorKV struct {
	vllmKV
	TransferID          string          `json:"transfer_id"`
	RemoteBootstrapAddr string          `json:"remote_bootstrap_addr"`
	RemoteHost          string          `json:"remote_host"`
	RemoteHandshakePort json.RawMessage `json:"remote_handshake_port"`
	RemoteNotifyPort    json.RawMessage `json:"remote_notify_port"`
	RemoteDPSize        json.RawMessage `json:"remote_dp_size"`
	RemoteDPRank        json.RawMessage `json:"remote_dp_rank"`
}

// vllmConnector serves a vLLM leg of a Mooncake or MoRI-IO engine; false:
// the engine speaks NIXL (vllm.go serves it).
func (x *exchange) vllmConnector() bool {
	switch x.e.cfg.Connector {
	case ConnectorMooncake, ConnectorMoRIIO:
	default:
		return false
	}
	var kv *connectorKV
	if raw, ok := x.req[fieldKVTransferParams]; ok && string(raw) != "null" {
		kv = &connectorKV{}
		if err := json.Unmarshal(raw, kv); err != nil {
			x.reject(http.StatusBadRequest, "kv_transfer_params must be an object")
			return true
		}
	}
	if x.e.cfg.Connector == ConnectorMooncake {
		x.mooncake(kv)
	} else {
		x.moriio(kv)
	}
	return true
}

// mooncake: the prefill needs do_remote_decode and a transfer_id and
// answers without a handoff; the decode with params must be able to reach
// the named bootstrap server and find the named engine there.
func (x *exchange) mooncake(kv *connectorKV) {
	if x.e.cfg.Role == Prefill {
		if kv == nil || kv.DoRemoteDecode == nil || !*kv.DoRemoteDecode || kv.TransferID == "" {
			x.setViolation("mooncake prefill without do_remote_decode and a transfer_id")
		} else if string(x.req[fieldMaxTokens]) != "1" && string(x.req[fieldMaxCompletionTokens]) != "1" {
			x.setViolation("prefill cap is not 1")
		} else if !x.mooncakePlace(kv.TransferID) { // mooncake_dp.go
			x.reject(http.StatusBadRequest, "X-data-parallel-rank names no rank of this engine")
			return
		}
		x.answer("", "length", map[string]any{fieldKVTransferParams: nil}, nil)
		return
	}
	if kv != nil {
		if kv.DoRemotePrefill == nil || !*kv.DoRemotePrefill || kv.TransferID == "" || kv.RemoteEngineID == "" || kv.RemoteBootstrapAddr == "" {
			x.reject(http.StatusBadRequest, "mooncake decode params lack do_remote_prefill, transfer_id, remote_engine_id or remote_bootstrap_addr")
			return
		}
		if err := x.e.mooncakePull(x.r.Context(), kv.RemoteBootstrapAddr, kv.RemoteEngineID, kv.TransferID); err != nil {
			// The engine's pull fails: vLLM's default failure policy
			// recomputes, which the fake records as a violation.
			x.setViolation("mooncake pull: " + err.Error())
		}
	}
	x.answer("Hello from the fake vLLM Mooncake decode, the answer is 42.", "stop", nil, nil)
}

// serveMooncakeQuery is the prefill bootstrap server's GET /query: the
// engine id per DP rank (mooncakeQueryBody).
func (e *Engine) serveMooncakeQuery(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(e.mooncakeQueryBody())
}

// moriio: the prefill needs do_remote_decode and a transfer_id (WRITE: the
// decode's side channel too) and returns its handoff; a decode without a
// handoff, or with one that does not name this transfer's prefill, is a
// violation.
func (x *exchange) moriio(kv *connectorKV) {
	if x.e.cfg.Role == Prefill {
		switch {
		case kv == nil || kv.DoRemoteDecode == nil || !*kv.DoRemoteDecode || kv.TransferID == "":
			x.setViolation("moriio prefill without do_remote_decode and a transfer_id")
		case x.e.cfg.MoRIIOMode == "write" && (kv.RemoteHost == "" || len(kv.RemoteHandshakePort) == 0 || len(kv.RemoteNotifyPort) == 0):
			x.setViolation("moriio write prefill without the decode's side channel")
		case string(x.req[fieldIgnoreEOS]) != "true":
			x.setViolation("moriio prefill without ignore_eos")
		}
		tid, rank := "", 0
		if kv != nil {
			tid = kv.TransferID
			if x.e.cfg.DPSize > 1 {
				// Ranks are placed as a Mooncake DP prefill's are
				// (mooncake_dp.go): the header's, else the balancer's.
				if !x.mooncakePlace(tid) {
					x.reject(http.StatusBadRequest, "X-data-parallel-rank names no rank of this engine")
					return
				}
				rank = x.e.TransferRank(tid)
			}
			if x.moriWrite() && !x.moriWritePrefill(kv, rank) { // moriio_write.go
				return
			}
		}
		host := x.e.remoteHost()
		x.answer("", "length", map[string]any{fieldKVTransferParams: map[string]any{
			kvDoRemotePrefill:     true,
			kvDoRemoteDecode:      false,
			kvRemoteBlockIDs:      []int{0, 1, 2, 3},
			kvRemoteEngineID:      net.JoinHostPort(host, strconv.Itoa(moriHandshakePort)),
			kvRemoteHost:          host,
			kvRemoteHandshakePort: moriHandshakePort,
			kvRemoteNotifyPort:    moriNotifyPort,
			kvRemoteDPSize:        max(x.e.cfg.DPSize, 1),
			kvTPSize:              1,
			kvTransferID:          tid,
		}}, nil)
		return
	}
	switch {
	case x.moriWrite():
		if !x.moriWriteDecode(kv) { // moriio_write.go: waits for the push
			return
		}
	case kv == nil || kv.DoRemotePrefill == nil || !*kv.DoRemotePrefill || kv.TransferID == "" || kv.RemoteEngineID == "" || len(kv.RemoteBlockIDs) == 0:
		x.setViolation("moriio decode without a prefill handoff (it never recomputes)")
	}
	x.answer("Hello from the fake vLLM MoRI-IO decode, the answer is 42.", "stop", nil, nil)
}

// moriWrite: a WRITE-mode MoRI-IO leg on a side-channel fabric.
func (x *exchange) moriWrite() bool {
	return x.e.cfg.MoRIIOFabric != nil && x.e.cfg.MoRIIOMode == "write"
}

// connectorLabels are the endpoint labels a gateway needs for this engine's
// connector (Endpoint): the Mooncake prefill's engine id, MoRI-IO's mode.
func (e *Engine) connectorLabels() map[string]string {
	switch {
	case e.cfg.Connector == ConnectorMooncake && e.cfg.Role == Prefill:
		return map[string]string{"kv_engine_id": e.engineID}
	case e.cfg.Connector == ConnectorMoRIIO && e.cfg.MoRIIOMode != "":
		l := map[string]string{"moriio_mode": e.cfg.MoRIIOMode}
		if e.cfg.DPSize > 1 {
			l["dp_size"] = strconv.Itoa(e.cfg.DPSize)
		}
		return l
	}
	return nil
}
