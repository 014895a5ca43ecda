package pd

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/infergate/infergate/datapath/upstream"
	"github.com/infergate/infergate/spec"
)

// vLLM's MoRIIOConnector moves the KV over RDMA in one of two modes: READ
// (the decode pulls the prefill's blocks after the prefill leg returns) or
// WRITE (the prefill pushes into blocks the decode allocates; the prefill
// leg names the decode's side channel). Its decode never recomputes: given
// no usable handoff it answers over KV that never arrived (READ) or waits
// for a push that never comes (WRITE). So, unlike NIXL and Mooncake, every
// problem fails the request, and nothing reaches a decode without a
// checked handoff. SMG's codes and semantics are matched (its HTTP router
// is the reference), its opt-in concurrent WRITE dispatch included
// (moriio_write.go).

// MoRI-IO client codes (SMG's).
const (
	// CodeMoRIIOPairMisconfigured (503): the chosen pair cannot run MoRI-IO
	// (a leg not MoRIIOConnector, modes differ, a bad label, a WRITE
	// decode side channel the prefill cannot reach). The reason is
	// logged, not sent: it names internal addresses.
	CodeMoRIIOPairMisconfigured = "moriio_pair_misconfigured"
	// CodeMoRIIOFanoutUnsupported (400): n > 1, best_of > 1, beam search, a
	// prompt list or a prompt_embeds list would share one handoff.
	CodeMoRIIOFanoutUnsupported = "moriio_fanout_unsupported"
	// CodeMoRIIORouteUnsupported (501): only completions and chat
	// completions carry the handoff.
	CodeMoRIIORouteUnsupported = "moriio_route_unsupported"
	// CodeMoRIIOHandoffInvalid (502): the prefill returned no usable
	// handoff (missing, another transfer's, or malformed); no decode leg.
	CodeMoRIIOHandoffInvalid = "moriio_handoff_invalid"
	// CodePrefillFailed (502): the prefill failed without an engine status
	// to relay and the decode cannot compute the prompt itself.
	CodePrefillFailed = "pd_prefill_failed"
)

// MoRI-IO wire names (kv_transfer_params and the completions body).
const (
	fieldRemoteHost          = "remote_host"
	fieldRemoteHandshakePort = "remote_handshake_port"
	fieldRemoteNotifyPort    = "remote_notify_port"
	fieldRemoteDPSize        = "remote_dp_size"
	fieldRemoteDPSizeLocal   = "remote_dp_size_local"
	fieldRemoteDPRank        = "remote_dp_rank"
	fieldRemoteTPSize        = "remote_tp_size"
	fieldTPSize              = "tp_size"
	fieldPromptEmbeds        = "prompt_embeds"
)

// MoRI-IO modes and dispatches (label values).
const (
	moriRead               = "read"
	moriWrite              = "write"
	moriDispatchSequential = "sequential"
	moriDispatchConcurrent = "concurrent"
)

// The engine's side-channel port defaults (kv_connector_extra_config).
const (
	defaultMoRIIOHandshakePort = 6301
	defaultMoRIIONotifyPort    = 61005
)

// moriSide is one leg's MoRI-IO settings, from its labels.
type moriSide struct {
	mode              string
	host              string // side channel host: moriio_host, else the endpoint's IP
	handshake, notify int
	tp                int  // 0: not declared
	dp                int  // data-parallel size (moriDPSize)
	concurrent        bool // moriio_write_dispatch concurrent
}

// moriSideOf reads ep's MoRI-IO labels (the DP size defaulting to rule's
// kvDpRankCount); an error names the bad one.
func moriSideOf(ep spec.Endpoint, rule *spec.Rule) (moriSide, error) {
	s := moriSide{host: ep.Addr.Addr().String(), handshake: defaultMoRIIOHandshakePort, notify: defaultMoRIIONotifyPort}
	if !strings.EqualFold(connectorName(ep), connectorMoRIIO) {
		return s, fmt.Errorf("%s is not a %s endpoint (kv_connector %q)", ep.ID, connectorMoRIIO, connectorName(ep))
	}
	l := ep.Labels
	switch s.mode = strings.ToLower(l[labelMoRIIOMode]); s.mode {
	case moriRead, moriWrite:
	case "":
		return s, fmt.Errorf("%s has no %s label (read or write)", ep.ID, labelMoRIIOMode)
	default:
		return s, fmt.Errorf("%s: %s %q is not read or write", ep.ID, labelMoRIIOMode, l[labelMoRIIOMode])
	}
	if h, ok := l[labelMoRIIOHost]; ok {
		if !isHost(h) {
			return s, fmt.Errorf("%s: %s %q is not a host", ep.ID, labelMoRIIOHost, h)
		}
		s.host = h
	}
	for _, p := range []struct {
		label string
		into  *int
	}{{labelMoRIIOHandshakePort, &s.handshake}, {labelMoRIIONotifyPort, &s.notify}} {
		if v, ok := l[p.label]; ok {
			n, err := strconv.Atoi(v)
			if err != nil || !isPort(int64(n)) {
				return s, fmt.Errorf("%s: %s %q is not a port", ep.ID, p.label, v)
			}
			*p.into = n
		}
	}
	if v, ok := l[labelTPSize]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return s, fmt.Errorf("%s: %s %q is not a positive integer", ep.ID, labelTPSize, v)
		}
		s.tp = n
	}
	var err error
	if s.dp, err = moriDPSize(ep, rule); err != nil {
		return s, err
	}
	switch d := l[labelMoRIIOWriteDispatch]; d {
	case "", moriDispatchSequential:
	case moriDispatchConcurrent:
		if s.mode != moriWrite {
			// READ's decode pulls blocks the prefill names in its answer:
			// it cannot start first. Refused rather than run sequentially.
			return s, fmt.Errorf("%s: %s concurrent needs write mode (a read decode pulls after the prefill answers)", ep.ID, labelMoRIIOWriteDispatch)
		}
		s.concurrent = true
	default:
		return s, fmt.Errorf("%s: %s %q is not sequential or concurrent", ep.ID, labelMoRIIOWriteDispatch, d)
	}
	return s, nil
}

// moriPair checks that prefill p and decode d can run MoRI-IO together
// and returns both sides; an error is the reason (logged, 503
// moriio_pair_misconfigured). The rule: both legs MoRIIOConnector with
// valid labels, the same mode, and in WRITE mode a decode side channel
// the prefill can reach: not loopback or unspecified unless the
// prefill's is too (a loopback address names the prefill's own host), and
// not the prefill's own side channel (on one host, their per-rank
// handshake port ranges must not meet). Under concurrent dispatch (the decode's
// label) the decode also dials the prefill's labelled side channel, so the
// same rule holds the other way round.
func moriPair(p, d spec.Endpoint, rule *spec.Rule) (ps, ds moriSide, err error) {
	if ps, err = moriSideOf(p, rule); err != nil {
		return ps, ds, err
	}
	if ds, err = moriSideOf(d, rule); err != nil {
		return ps, ds, err
	}
	if ps.mode != ds.mode {
		return ps, ds, fmt.Errorf("prefill %s is in %s mode, decode %s in %s mode", p.ID, ps.mode, d.ID, ds.mode)
	}
	if ds.mode == moriWrite {
		if localHost(ds.host) && !localHost(ps.host) {
			return ps, ds, fmt.Errorf("write mode: decode %s side channel %s is loopback or unspecified while prefill %s's (%s) is not: the prefill would push to itself", d.ID, ds.host, p.ID, ps.host)
		}
		if ds.host == ps.host && ds.handshake < ps.handshake+ps.ports() && ps.handshake < ds.handshake+ds.ports() {
			return ps, ds, fmt.Errorf("write mode: decode %s side channel %s:%d is prefill %s's own", d.ID, ds.host, ds.handshake, p.ID)
		}
		if ds.concurrent && localHost(ps.host) && !localHost(ds.host) {
			return ps, ds, fmt.Errorf("concurrent write: prefill %s side channel %s is loopback or unspecified while decode %s's (%s) is not: the decode would notify itself", p.ID, ps.host, d.ID, ds.host)
		}
	}
	return ps, ds, nil
}

// ports is how many side-channel ports from each base port s's ranks
// listen on (one per DP rank and TP rank).
func (s moriSide) ports() int { return s.dp * max(s.tp, 1) }

// localHost reports a host only its own machine can reach.
func localHost(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(strings.Trim(h, "[]"))
	return err == nil && (a.IsLoopback() || a.IsUnspecified())
}

// moriFanout names a request shape that would share one handoff ("" none).
func moriFanout(o *object, path string) string {
	if shape := multiShape(o, path); shape != "" {
		return shape
	}
	if v, ok := o.lookup(fieldPromptEmbeds); ok && isCompletions(path) {
		if a, err := parseArray(v); err == nil && len(a) > 1 {
			return ShapePromptList
		}
	}
	return ""
}

// moriParams is a MoRI-IO leg's kv_transfer_params as the gateway mints
// them: a prefill's (do_remote_decode) or a concurrent WRITE decode's
// (do_remote_prefill), with the peer's side channel when the leg is told
// one.
type moriParams struct {
	DoRemoteDecode      bool   `json:"do_remote_decode"`
	DoRemotePrefill     bool   `json:"do_remote_prefill"`
	TransferID          string `json:"transfer_id"`
	RemoteDPSize        int    `json:"remote_dp_size"`
	RemoteDPRank        *int   `json:"remote_dp_rank,omitempty"`
	RemoteTPSize        int    `json:"remote_tp_size,omitempty"`
	RemoteHost          string `json:"remote_host,omitempty"`
	RemoteHandshakePort int    `json:"remote_handshake_port,omitempty"`
	RemoteNotifyPort    int    `json:"remote_notify_port,omitempty"`
}

// moriParamsTo is moriParams for transfer tid naming peer side channel p
// (its DP size, its TP when labelled); withChannel adds p's host and
// ports.
func moriParamsTo(tid string, p moriSide, withChannel bool) moriParams {
	v := moriParams{TransferID: tid, RemoteDPSize: p.dp, RemoteTPSize: p.tp}
	if withChannel {
		v.RemoteHost, v.RemoteHandshakePort, v.RemoteNotifyPort = p.host, p.handshake, p.notify
	}
	return v
}

// moriPrefillParams tags a MoRI-IO prefill leg: keep the KV for a remote
// decode under transfer id tid, the decode's DP and TP; in WRITE mode
// also the decode side channel to push to.
func moriPrefillParams(tid string, ds moriSide) []byte {
	v := moriParamsTo(tid, ds, ds.mode == moriWrite)
	v.DoRemoteDecode = true
	b, _ := json.Marshal(v)
	return b
}

// moriHandoff reads and checks a MoRI-IO prefill's kv_transfer_params
// (checkMoRIIOParams); a missing handoff is an error too: the decode
// cannot do without it.
func moriHandoff(body []byte, tid string) ([]byte, error) {
	obj, err := parseObject(body)
	if err != nil {
		return nil, handoffErr("", "missing: the prefill response is not a JSON object")
	}
	v, ok := obj.lookup(fieldKVTransferParams)
	if !ok || string(v) == "null" {
		return nil, handoffErr("", "missing")
	}
	if v[0] != '{' {
		return nil, handoffErr("", "is not an object")
	}
	return v, checkMoRIIOParams(v, tid)
}

// checkMoRIIOParams is the MoRI-IO handoff rule (what the decode engine's
// scheduler parses without guarding): transfer_id is the one minted for
// this request; remote_engine_id and remote_block_ids as for NIXL
// (checkPrefillKV); remote_host a non-empty string without whitespace;
// remote_handshake_port and remote_notify_port ports in 1..65535, as a
// number or a decimal string; the counts (remote_dp_size,
// remote_dp_size_local, remote_dp_rank, tp_size, remote_tp_size), when
// present and not null, non-negative integers as a number or a decimal
// string. Other fields pass verbatim.
func checkMoRIIOParams(params []byte, tid string) error {
	po, err := parseObject(params)
	if err != nil {
		return handoffErr("", "is not a JSON object")
	}
	got, ok := po.lookup(fieldTransferID)
	if !ok {
		return handoffErr("."+fieldTransferID, "missing")
	}
	if s, isStr := jsonStringValue(got); !isStr || s != tid {
		return handoffErr("."+fieldTransferID, "is not the transfer this request started")
	}
	if err := checkPrefillKV(&po); err != nil {
		return err
	}
	host, ok := po.lookup(fieldRemoteHost)
	if s, isStr := jsonStringValue(host); !ok || !isStr || !isHost(s) {
		return handoffErr("."+fieldRemoteHost, "must be a host name or address without whitespace")
	}
	for _, f := range []string{fieldRemoteHandshakePort, fieldRemoteNotifyPort} {
		v, ok := po.lookup(f)
		if n, isInt := intOrDecimal(v); !ok || !isInt || !isPort(n) {
			return handoffErr("."+f, "must be a port number in 1..65535")
		}
	}
	for _, f := range []string{fieldRemoteDPSize, fieldRemoteDPSizeLocal, fieldRemoteDPRank, fieldTPSize, fieldRemoteTPSize} {
		v, ok := po.lookup(f)
		if !ok || string(v) == "null" {
			continue
		}
		if n, isInt := intOrDecimal(v); !isInt || n < 0 {
			return handoffErr("."+f, "must be a non-negative integer")
		}
	}
	return nil
}

// intOrDecimal parses an integer written as a JSON number or as a string
// of decimal digits (the engine's config values arrive either way).
func intOrDecimal(v []byte) (int64, bool) {
	if s, isStr := jsonStringValue(v); isStr {
		if s == "" || strings.TrimLeft(s, "0123456789") != "" {
			return 0, false
		}
		n, err := strconv.ParseInt(s, 10, 64)
		return n, err == nil
	}
	return jsonInt(v)
}

// MoRIIORouteMessage is the client message of 501
// CodeMoRIIORouteUnsupported for path, whether the dialect refuses it (a
// path it would split) or the datapath does (one it would send unsplit).
func MoRIIORouteMessage(path string) string {
	return "MoRI-IO prefill/decode serves /v1/completions and /v1/chat/completions only, not " + path
}

// runMoRIIO is the MoRI-IO sequence. Before any leg: the route (501), the
// pair (503) and the request shape (400). Then a one-token prefill tagged
// with a fresh transfer id (one failover, on a prefill that pairs with the
// decode), and the decode with the prefill's checked handoff. A decode
// failover happens only in READ mode (the handoff names the prefill's
// blocks; in WRITE mode the prefill pushes to the decode it was told).
// No failure falls back to a decode without its handoff.
func runMoRIIO(q *seq) {
	req, o := q.req, q.o
	if !isCompletions(req.Path) && !isChat(req.Path) {
		q.fail(PhasePrefill, http.StatusNotImplemented, CodeMoRIIORouteUnsupported, MoRIIORouteMessage(req.Path))
		return
	}
	ps, ds, err := moriPair(q.pair.Prefill, q.pair.Decode, req.Rule)
	if err != nil {
		q.log.WithField("reason", err.Error()).Warn("pd: MoRI-IO pair misconfigured; no leg sent")
		q.fail(PhasePrefill, http.StatusServiceUnavailable, CodeMoRIIOPairMisconfigured,
			"the selected prefill/decode pair is not configured for MoRI-IO (the reason is in the gateway log)")
		return
	}
	if shape := moriFanout(&q.obj, req.Path); shape != "" {
		q.fail(PhasePrefill, http.StatusBadRequest, CodeMoRIIOFanoutUnsupported,
			"MoRI-IO hands one prompt's KV to one decode ("+shape+"): send one prompt and one sample per request")
		return
	}
	q.pair.AltPrefill = moriAlternates(q.pair.AltPrefill, func(p spec.Endpoint) error {
		_, _, err := moriPair(p, q.pair.Decode, req.Rule)
		return err
	})
	// A plain request id: the connector reads peers from vLLM's
	// ___prefill_addr_ markers before the explicit fields.
	suffix := idSuffix(req.RequestID)
	if ds.concurrent {
		runMoRIIOConcurrent(q, ps, ds, suffix)
		return
	}
	var tid string
	rank := moriRank{release: func() {}}
	build := func(prefill spec.Endpoint) upstream.Leg {
		tid = newTransferID()
		rank.release()
		if prefill.ID != q.pair.Prefill.ID {
			// An alternate passed moriPair above: its side is valid.
			ps, _ = moriSideOf(prefill, req.Rule)
		}
		rank = q.moriRankFor(prefill, ps) // moriio_dp.go
		leg := q.moriPrefillLeg(prefill, suffix, tid, ds)
		rank.pin(leg.Header)
		return leg
	}
	r, prefill, ok, done := q.prefillWithFailover(build, prefillWords{leg: "prefill", fallback: "the request fails (a MoRI-IO decode never recomputes)"})
	rank.release()
	if done {
		return
	}
	o.KVTransferFailed = false // nothing recomputes: the request fails below
	var params []byte
	switch {
	case r.overflow:
		err = handoffErr("", "unreadable: the prefill response is over the size cap")
	case !ok && r.leg.Status >= 500:
		writeBuffered(q.w, r.leg.Status, r.header, r.body)
		o.Status, o.Relayed, o.FailedPhase = r.leg.Status, true, PhasePrefill
		return
	case !ok:
		q.fail(PhasePrefill, http.StatusBadGateway, CodePrefillFailed,
			"prefill failed and a MoRI-IO decode cannot compute the prompt without its handoff")
		return
	default:
		if params, err = moriHandoff(r.body, tid); err == nil {
			params, err = moriHandoffRank(params, rank)
		}
	}
	if err != nil {
		q.handoffInvalidCode(prefill.ID, CodeMoRIIOHandoffInvalid, err)
		return
	}
	if ds.mode == moriWrite {
		q.pair.AltDecode = nil
	} else {
		q.pair.AltDecode = moriAlternates(q.pair.AltDecode, func(d spec.Endpoint) error {
			_, _, err := moriPair(prefill, d, req.Rule)
			return err
		})
	}
	q.vllmDecode(params, suffix)
}

// moriPrefillLeg is a MoRI-IO prefill leg to prefill for transfer tid,
// told the decode side channel ds (sequential and concurrent dispatch).
func (q *seq) moriPrefillLeg(prefill spec.Endpoint, suffix, tid string, ds moriSide) upstream.Leg {
	return q.vllmLeg(prefill, suffix, vllmPrefillBodyWith(&q.obj, q.req.Path, moriPrefillParams(tid, ds)))
}

// moriAlternates keeps the endpoints ok accepts (a failover must pair too).
func moriAlternates(eps []spec.Endpoint, ok func(spec.Endpoint) error) []spec.Endpoint {
	var out []spec.Endpoint
	for _, e := range eps {
		if ok(e) == nil {
			out = append(out, e)
		}
	}
	return out
}
