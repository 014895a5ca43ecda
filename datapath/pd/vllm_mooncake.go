package pd

import (
	"encoding/json"
	"net"
	"strconv"
	"strings"

	"github.com/infergate/infergate/datapath/upstream"
	"github.com/infergate/infergate/spec"
)

// vLLM's MooncakeConnector: the prefill pushes its KV to the decode that
// names it, and its response carries no handoff. The gateway therefore
// mints the rendezvous itself: one transfer id on both legs, and on the
// decode leg the prefill's KV engine id and the address of the prefill's
// Mooncake bootstrap server, which the decode asks for the prefill's
// workers. The legs run one after the other (a held prefill keeps its
// blocks until the decode asks, VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT), so
// the prefill failover and decode failover of the NIXL sequence apply
// unchanged: any decode can claim the transfer with the id and address.

// Wire names of Mooncake's kv_transfer_params.
const (
	fieldTransferID          = "transfer_id"
	fieldRemoteBootstrapAddr = "remote_bootstrap_addr"
)

// SkipNoEngineID is the reason (infergate_pd_unsplit_requests_total) a
// Mooncake request ran on its decode alone: the prefill's KV engine id is
// not known, so no decode could name the prefill's KV.
const SkipNoEngineID = "mooncake_engine_id_unknown"

// defaultMooncakeBootstrapPort is vLLM's VLLM_MOONCAKE_BOOTSTRAP_PORT
// default.
const defaultMooncakeBootstrapPort = 8998

// mooncakeEngineID is a prefill's KV engine id: its kv_engine_id label,
// else the one the datapath learned from the prefill's bootstrap server
// (vLLM's HTTP server does not report it; MooncakeQueryURL).
func (q *seq) mooncakeEngineID(ep spec.Endpoint) string {
	if id := ep.Labels[labelKVEngineID]; id != "" {
		return id
	}
	if q.req.EngineIDs != nil {
		return q.req.EngineIDs.KVEngineID(ep.ID)
	}
	return ""
}

// mooncakeBootstrapAddr is the URL of a prefill's Mooncake bootstrap
// server: its own bootstrap_port, else the default.
func mooncakeBootstrapAddr(ep spec.Endpoint) string {
	port := ep.BootstrapPort
	if port == 0 {
		port = defaultMooncakeBootstrapPort
	}
	return "http://" + net.JoinHostPort(ep.Addr.Addr().String(), strconv.Itoa(int(port)))
}

// mooncakePrefillParams tags the prefill leg: keep the KV for a remote
// decode under transfer id tid.
func mooncakePrefillParams(tid string) []byte {
	b, _ := json.Marshal(struct {
		DoRemoteDecode  bool   `json:"do_remote_decode"`
		DoRemotePrefill bool   `json:"do_remote_prefill"`
		TransferID      string `json:"transfer_id"`
	}{true, false, tid})
	return b
}

// mooncakeDecodeParams tell a decode where to claim transfer tid: the
// prefill's engine id and bootstrap server.
func mooncakeDecodeParams(tid, engineID string, prefill spec.Endpoint) []byte {
	b, _ := json.Marshal(struct {
		DoRemoteDecode      bool   `json:"do_remote_decode"`
		DoRemotePrefill     bool   `json:"do_remote_prefill"`
		TransferID          string `json:"transfer_id"`
		RemoteEngineID      string `json:"remote_engine_id"`
		RemoteBootstrapAddr string `json:"remote_bootstrap_addr"`
	}{false, true, tid, engineID, mooncakeBootstrapAddr(prefill)})
	return b
}

// newTransferID mints a transfer id: unique across gateway replicas and
// retries, so a late push of an abandoned prefill never lands in a newer
// request's blocks.
func newTransferID() string { return "xfer-" + hex32() }

// runMooncake is the Mooncake sequence: a one-token prefill tagged with a
// fresh transfer id (one prefill failover, each attempt its own id), then
// the client's request to decode with the minted handoff. A prefill that
// failed twice, or one whose engine id is unknown, leaves the decode to
// compute the prompt (Mooncake's decode recomputes without params).
// runVLLM has already sent shapes one transfer cannot serve to a decode
// alone; suffix is the request id both legs carry.
func runMooncake(q *seq, suffix string) {
	req, o := q.req, q.o
	first := q.mooncakeTargetFor(q.pair.Prefill, q.pair.PrefillDPRank, q.pair.HasPrefillDPRank)
	if first.id == "" {
		// Without the engine id no decode can name the KV: a prefill leg
		// would only hold blocks until Mooncake's abort timeout.
		q.warnNoEngineID(q.pair.Prefill)
		o.PrefillSkipped, o.KVTransferFailed = SkipNoEngineID, true
		q.vllmDecode(nil, suffix)
		return
	}
	var tid string
	target, attempt := first, 0
	release := func() {} // the pinned rank's in-flight count (rankload.go)
	build := func(prefill spec.Endpoint) upstream.Leg {
		tid = newTransferID()
		release()
		if attempt++; attempt > 1 {
			target = q.mooncakeTargetFor(prefill, 0, false) // alternates have no KV-exact rank
		}
		leg := q.vllmLeg(prefill, suffix, vllmPrefillBodyWith(&q.obj, req.Path, mooncakePrefillParams(tid)))
		if target.pinned {
			// The decode will name this rank's engine (vllm_mooncake_dp.go).
			leg.Header.Set(headerDPRank, strconv.Itoa(target.rank))
			release = q.rankLoad(prefill.ID).Hold(target.rank)
		}
		return leg
	}
	_, prefill, ok, done := q.prefillWithFailover(build, prefillWords{leg: "prefill", fallback: "decode recomputes"})
	release()
	if done {
		return
	}
	var params []byte
	switch {
	case !ok:
	case target.id == "":
		// The failover prefill has no engine id to name.
		q.warnNoEngineID(prefill)
		o.KVTransferFailed = true
	default:
		params = mooncakeDecodeParams(tid, target.id, prefill)
	}
	q.vllmDecode(params, suffix)
}

// warnNoEngineID logs a Mooncake prefill that cannot be named to a decode.
func (q *seq) warnNoEngineID(prefill spec.Endpoint) {
	q.log.WithField("endpoint", prefill.ID).Warn("pd: mooncake prefill has no kv_engine_id label and none was learned from its bootstrap server; decode computes the prompt")
}

// A Mooncake prefill's bootstrap server answers GET /query with its KV
// engine id per data-parallel rank ({"0": {"engine_id": …}, …}); the
// datapath reads it, off the request path, for prefills without a
// kv_engine_id label (LearnsMooncakeEngineID) and hands it back through
// Request.EngineIDs.

// pathMooncakeQuery is the bootstrap server's engine-id route.
const pathMooncakeQuery = "/query"

// maxEngineIDLen bounds an engine id taken from the wire.
const maxEngineIDLen = 256

// LearnsMooncakeEngineID reports whether endpoint i of r is a vLLM
// Mooncake prefill (its own kv_connector, or any decode's on the rule)
// whose engine id is not configured, or which declares several DP ranks,
// so it must be read from its bootstrap server.
func LearnsMooncakeEngineID(r *spec.Rule, i int) bool {
	ep := r.Endpoints[i]
	// A label names one engine: a prefill labelled dp_size > 1 still has
	// its per-rank engines read (vllm_mooncake_dp.go).
	if r.PD == nil || r.Engine != spec.EngineVLLM || ep.Role != spec.RolePrefill || (ep.Labels[labelKVEngineID] != "" && labelledDPSize(ep) <= 1) {
		return false
	}
	if strings.EqualFold(connectorName(ep), connectorMooncake) {
		return true
	}
	for _, e := range r.Endpoints {
		if e.Role == spec.RoleDecode && strings.EqualFold(connectorName(e), connectorMooncake) {
			return true
		}
	}
	return false
}

// MooncakeQueryURL is the URL of prefill ep's engine-id route.
func MooncakeQueryURL(ep spec.Endpoint) string { return mooncakeBootstrapAddr(ep) + pathMooncakeQuery }

// ParseMooncakeQuery is the engine id a /query body gives for DP rank 0
// (the rank the gateway's Mooncake legs use); ok is false when it names
// none, or one that is empty, too long or holds whitespace or control
// bytes (a decode would send it back to the prefill's workers verbatim).
func ParseMooncakeQuery(body []byte) (id string, ok bool) {
	var ranks map[string]struct {
		EngineID string `json:"engine_id"`
	}
	if json.Unmarshal(body, &ranks) != nil {
		return "", false
	}
	id = ranks["0"].EngineID
	if !validEngineID(id) {
		return "", false
	}
	return id, true
}
