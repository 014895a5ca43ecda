package pd

import (
	"strings"

	"github.com/infergate/infergate/spec"
)

// vLLM's KV connectors differ in what the gateway must carry between the
// legs: NIXL's prefill returns the handoff and the decode pulls it;
// Mooncake's prefill returns nothing, so the gateway mints the rendezvous
// (a transfer id and the prefill's bootstrap address); MoRI-IO returns a
// handoff the decode cannot live without, because its decode never
// recomputes. The connector is an endpoint's kv_connector pair fact
// (declared on static endpoints, advertised by registrations); the
// MoRI-IO and Mooncake settings vLLM's HTTP server does not report come
// from endpoint labels.

// connector is the KV transfer a vLLM pair speaks.
type connector int

const (
	connNIXL     connector = iota // NixlConnector, or nothing declared
	connMooncake                  // MooncakeConnector
	connMoRIIO                    // MoRIIOConnector
)

// String is the connector's metric label.
func (c connector) String() string {
	switch c {
	case connMooncake:
		return ConnectorMooncake
	case connMoRIIO:
		return "moriio"
	}
	return "nixl"
}

// vLLM's kv_connector names (the engine's --kv-transfer-config values).
const (
	connectorNIXL     = "NixlConnector"
	connectorMooncake = "MooncakeConnector"
	connectorMoRIIO   = "MoRIIOConnector"
)

// connectorName is ep's declared kv_connector ("" none).
func connectorName(ep spec.Endpoint) string { return ep.PairFacts[spec.FactKVConnector] }

// vllmConnector is the sequence a vLLM pair runs, chosen by the decode's
// kv_connector (the decode is the leg that cannot recover from a wrong
// handoff: a MoRI-IO decode never recomputes), else the prefill's. Unknown
// names and undeclared endpoints run NIXL's sequence, whose decode
// recomputes when the prefill returns nothing.
func vllmConnector(pair Pair) connector {
	name := connectorName(pair.Decode)
	if name == "" {
		name = connectorName(pair.Prefill)
	}
	switch {
	case strings.EqualFold(name, connectorMooncake):
		return connMooncake
	case strings.EqualFold(name, connectorMoRIIO):
		return connMoRIIO
	}
	return connNIXL
}

// Endpoint labels the connector sequences read (vLLM's HTTP server reports
// none of these settings; they mirror the engine's kv_connector_extra_config).
const (
	// labelKVEngineID is a vLLM prefill's KV engine id (its
	// kv_transfer_config engine_id), which a Mooncake decode names to pull.
	labelKVEngineID = "kv_engine_id"
	// labelMoRIIOMode is read or write; both legs of a pair must agree.
	labelMoRIIOMode = "moriio_mode"
	// labelMoRIIOHost is the address a peer reaches this engine's MoRI-IO
	// side channel on (default: the endpoint's IP).
	labelMoRIIOHost = "moriio_host"
	// labelMoRIIOHandshakePort and labelMoRIIONotifyPort are the engine's
	// handshake_port and notify_port.
	labelMoRIIOHandshakePort = "moriio_handshake_port"
	labelMoRIIONotifyPort    = "moriio_notify_port"
	// labelMoRIIOWriteDispatch is sequential (the default) or concurrent
	// (WRITE pairs only; read on the decode): whether the two legs go one
	// after the other or at once.
	labelMoRIIOWriteDispatch = "moriio_write_dispatch"
	// labelTPSize is an engine's tensor-parallel size; a decode's is sent
	// to the prefill as remote_tp_size.
	labelTPSize = "tp_size"
	// labelDPSize is an engine's data-parallel size (moriio_dp.go,
	// vllm_mooncake_dp.go).
	labelDPSize = "dp_size"
)
