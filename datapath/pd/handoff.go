package pd

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode"
)

// CodeHandoffInvalid is the 502 for a prefill whose transfer parameters a
// decode engine could not use safely. The decode leg is never sent: vLLM's
// connector acts on these fields inside the engine's scheduler, where a
// malformed value (a string block id, a port of 70000) fails every request
// the scheduler holds, not just this one.
const CodeHandoffInvalid = "pd_handoff_invalid"

// Fields of vLLM's kv_transfer_params the gateway checks before relaying
// them to a decode (NixlConnector and the connectors that copied its shape).
const (
	fieldRemoteEngineID = "remote_engine_id"
	fieldRemoteBlockIDs = "remote_block_ids"
)

// Families of kv_transfer_params fields checked by name shape, so a
// connector's variant (remote_bootstrap_port, remote_tp_size) is held to
// the same rule as the NIXL field without being listed.
const (
	suffixHost  = "_host" // a host name or address: non-empty, no whitespace
	suffixPort  = "_port" // a TCP port: an integer in 1..65535
	suffixCount = "_size" // a count (tp_size, remote_dp_size): an integer ≥ 0
)

// HandoffError names the kv_transfer_params field a prefill got wrong.
type HandoffError struct {
	Field   string // e.g. "kv_transfer_params.remote_block_ids[1]"
	Problem string
}

func (e *HandoffError) Error() string { return e.Field + ": " + e.Problem }

func handoffErr(field, problem string) error {
	return &HandoffError{Field: fieldKVTransferParams + field, Problem: problem}
}

// vllmHandoff reads the prefill response's kv_transfer_params. It returns
// nil params (and no error) when the prefill gave none — absent, null, or a
// body that is not a JSON object: the decode recomputes the prompt, as it
// always has. A present value that is not a well-formed handoff is an
// error (checkVLLMParams): relaying it would hand the decode engine state
// it cannot act on.
func vllmHandoff(body []byte) ([]byte, error) {
	obj, err := parseObject(body)
	if err != nil {
		return nil, nil
	}
	v, ok := obj.lookup(fieldKVTransferParams)
	if !ok || string(v) == "null" {
		return nil, nil
	}
	if v[0] != '{' {
		return nil, handoffErr("", "is not an object")
	}
	if err := checkVLLMParams(v); err != nil {
		return nil, err
	}
	return v, nil
}

// checkVLLMParams is the handoff rule: remote_engine_id a non-empty string;
// remote_block_ids a flat list of non-negative integers or one such list
// per KV cache group; every *_host a non-empty string without whitespace;
// every *_port an integer in 1..65535; every *_size count a non-negative
// integer. Other fields pass through unchecked (engines add their own).
// params must be a valid JSON object.
func checkVLLMParams(params []byte) error {
	po, err := parseObject(params)
	if err != nil {
		return handoffErr("", "is not a JSON object")
	}
	if err := checkPrefillKV(&po); err != nil {
		return err
	}
	for i := range po.members {
		m := &po.members[i]
		name := string(po.raw[m.keyStart:m.keyEnd])
		v := po.raw[m.valStart:m.valEnd]
		var problem string
		switch {
		case strings.HasSuffix(name, suffixHost):
			if s, isStr := jsonStringValue(v); !isStr || !isHost(s) {
				problem = "must be a host name or address without whitespace"
			}
		case strings.HasSuffix(name, suffixPort):
			if n, ok := jsonInt(v); !ok || !isPort(n) {
				problem = "must be a port number in 1..65535"
			}
		case strings.HasSuffix(name, suffixCount):
			if n, ok := jsonInt(v); !ok || n < 0 {
				problem = "must be a non-negative integer"
			}
		}
		if problem != "" {
			return handoffErr("."+name, problem)
		}
	}
	return nil
}

// checkPrefillKV is the part of the handoff every vLLM connector that
// returns one shares: remote_engine_id a non-empty string, remote_block_ids
// as checkBlockIDs takes them.
func checkPrefillKV(po *object) error {
	id, ok := po.lookup(fieldRemoteEngineID)
	if !ok {
		return handoffErr("."+fieldRemoteEngineID, "missing")
	}
	if s, isStr := jsonStringValue(id); !isStr || s == "" {
		return handoffErr("."+fieldRemoteEngineID, "must be a non-empty string")
	}
	blocks, ok := po.lookup(fieldRemoteBlockIDs)
	if !ok {
		return handoffErr("."+fieldRemoteBlockIDs, "missing")
	}
	return checkBlockIDs(blocks)
}

// checkBlockIDs accepts a flat list of block ids or a list of per-group
// lists (vLLM with hybrid KV cache groups), never a mix.
func checkBlockIDs(v []byte) error {
	field := "." + fieldRemoteBlockIDs
	var outer []json.RawMessage
	if json.Unmarshal(v, &outer) != nil || outer == nil {
		return handoffErr(field, "must be a list of block ids or one list per KV cache group")
	}
	nested := len(outer) > 0 && len(outer[0]) > 0 && outer[0][0] == '['
	for i, e := range outer {
		at := field + "[" + strconv.Itoa(i) + "]"
		if !nested {
			if n, ok := jsonInt(e); !ok || n < 0 {
				return handoffErr(at, "must be a non-negative integer block id")
			}
			continue
		}
		var inner []json.RawMessage
		if len(e) == 0 || e[0] != '[' || json.Unmarshal(e, &inner) != nil {
			return handoffErr(at, "must be a list of block ids (all groups nested alike)")
		}
		for j, b := range inner {
			if n, ok := jsonInt(b); !ok || n < 0 {
				return handoffErr(at+"["+strconv.Itoa(j)+"]", "must be a non-negative integer block id")
			}
		}
	}
	return nil
}

// isHost: a host name or address as a handoff field or a MoRI-IO label
// names one: non-empty, without whitespace.
func isHost(s string) bool { return s != "" && strings.IndexFunc(s, unicode.IsSpace) < 0 }

// isPort: a TCP port, 1..65535.
func isPort(n int64) bool { return n >= 1 && n <= 65535 }

// jsonInt parses a JSON number written as an integer (no fraction, no
// exponent): what the engines emit for ids, ports and counts.
func jsonInt(v []byte) (int64, bool) {
	if len(v) == 0 || strings.ContainsAny(string(v), ".eE") {
		return 0, false
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	return n, err == nil
}

// jsonStringValue decodes v when it is a JSON string.
func jsonStringValue(v []byte) (string, bool) {
	if len(v) == 0 || v[0] != '"' {
		return "", false
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return "", false
	}
	return s, true
}

// handoffInvalid ends a request whose prefill answered with a malformed
// handoff: 502, no decode leg, counted through Outcome.HandoffInvalid.
func (q *seq) handoffInvalid(prefillID string, err error) {
	q.handoffInvalidCode(prefillID, CodeHandoffInvalid, err)
}

// handoffInvalidCode is handoffInvalid with the connector's own code
// (MoRI-IO answers moriio_handoff_invalid, as SMG does).
func (q *seq) handoffInvalidCode(prefillID, code string, err error) {
	q.refuseHandoff(prefillID, code, err, "no decode leg was sent")
}

// refuseHandoff is handoffInvalidCode saying what became of the decode
// leg (concurrent MoRI-IO dispatch drops one already in flight).
func (q *seq) refuseHandoff(prefillID, code string, err error, decodeFate string) {
	q.o.HandoffInvalid = true
	var he *HandoffError
	field := ""
	if errors.As(err, &he) {
		field = he.Field
	}
	// The field name only: transfer objects are never logged.
	q.log.WithField("endpoint", prefillID).WithField("field", field).Warn("pd: prefill returned an invalid KV handoff; " + decodeFate)
	q.fail(PhasePrefill, http.StatusBadGateway, code,
		fmt.Sprintf("prefill %s returned an unusable KV handoff (%v); %s", prefillID, err, decodeFate))
}
