package rules

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/spec"
)

// P/D pairing: the transfer facts an endpoint declares (a prefill can hand
// its KV only to a decode with the same connector, block size and cache
// dtype) and the rule's pd_pairing_mode. These are infergate extensions;
// the datapath compares them per pair (datapath/pdpair.go), the same
// mechanism that compares what registered engines advertise.

// Wire names.
const (
	fieldPDPairingMode   = "pd_pairing_mode"
	fieldKVConnector     = "kv_connector"
	fieldKVBlockSizeEP   = "kv_block_size"
	fieldKVCacheDtype    = "kv_cache_dtype"
	fieldPairingProtocol = "pairing_protocol"
	fieldBootstrapPortEP = "bootstrap_port"
	fieldLabels          = "labels"
)

// pd_pairing_mode values.
const (
	PairingLenient = "lenient" // default: unknown facts pair
	PairingStrict  = "strict"  // both legs must declare a protocol or connector
)

// Limits of the free-form fields.
const (
	maxFactLen    = 64
	maxLabels     = 16
	maxLabelKey   = 63
	maxLabelValue = 256
)

// checkPairing: the pairing fields belong to P/D rules; the fact names
// are identifiers (they are compared byte for byte and shown in status);
// a per-endpoint bootstrap_port is an SGLang prefill's; labels are small.
func checkPairing(r *Rule) *apierror.Error {
	sa := &r.ServiceArguments
	if sa.PDPairingMode != "" && !sa.PDDisaggMode {
		msg := "pd_pairing_mode applies to prefill/decode rules (pd_disagg_mode)"
		return invalidCombo(saPath(fieldPDPairingMode), msg, msg)
	}
	for i := range r.Endpoints {
		ep := &r.Endpoints[i]
		facts := []struct{ name, v string }{
			{fieldKVConnector, ep.KVConnector}, {fieldKVCacheDtype, ep.KVCacheDtype}, {fieldPairingProtocol, ep.PairingProtocol},
		}
		for _, f := range facts {
			if f.v != "" && !isFactName(f.v) {
				msg := fmt.Sprintf("%s %q must be 1..%d letters, digits, '.', '_' or '-'", f.name, f.v, maxFactLen)
				return invalidField(epPath(i, f.name), msg, msg)
			}
		}
		if (ep.KVConnector != "" || ep.KVBlockSize != 0 || ep.KVCacheDtype != "" || ep.PairingProtocol != "") && !sa.PDDisaggMode {
			msg := "kv_connector, kv_block_size, kv_cache_dtype and pairing_protocol are prefill/decode pairing facts; the rule has no pd_disagg_mode"
			return invalidCombo(epPath(i, pairingFieldSet(ep)), msg, msg)
		}
		if ep.BootstrapPort != 0 && !(sa.PDDisaggMode && BootstrapPortAllowed(engineOf(sa), spec.Role(ep.EPRole), ep.KVConnector)) {
			msg := "bootstrap_port is the bootstrap server port of an SGLang prefill or a vLLM MooncakeConnector prefill (pd_disagg_mode, ep_role 1)"
			return invalidCombo(epPath(i, fieldBootstrapPortEP), msg, msg)
		}
		if err := checkLabels(i, ep.Labels); err != nil {
			return err
		}
	}
	return nil
}

// BootstrapPortAllowed reports whether an endpoint of engine and role with
// kvConnector may name its own bootstrap_port: a prefill runs a bootstrap
// server on SGLang and on vLLM with the MooncakeConnector
// (VLLM_MOONCAKE_BOOTSTRAP_PORT); a decode or another connector has none
// for the port to name. Static endpoints and registrations share it.
func BootstrapPortAllowed(engine spec.Engine, role spec.Role, kvConnector string) bool {
	if role != spec.RolePrefill {
		return false
	}
	switch engine {
	case spec.EngineSGLang:
		return true
	case spec.EngineVLLM:
		return strings.EqualFold(kvConnector, "MooncakeConnector")
	}
	return false
}

// pairingFieldSet names the first pairing fact ep sets, for the error path.
func pairingFieldSet(ep *Endpoint) string {
	switch {
	case ep.KVConnector != "":
		return fieldKVConnector
	case ep.KVBlockSize != 0:
		return fieldKVBlockSizeEP
	case ep.KVCacheDtype != "":
		return fieldKVCacheDtype
	}
	return fieldPairingProtocol
}

func checkLabels(i int, labels map[string]string) *apierror.Error {
	if key, msg := CheckLabels(labels); msg != "" {
		path := epPath(i, fieldLabels)
		if key != "" {
			path += "." + key
		}
		return invalidField(path, msg, msg)
	}
	return nil
}

// CheckLabels checks free-form endpoint labels against the limits static
// endpoints and registrations share: at most 16, keys of 1..63 letters,
// digits, '.', '_', '-' or '/', values of at most 256 characters without
// control characters. msg is "" when they are fine; key names the
// offending label ("" when the count is the problem).
func CheckLabels(labels map[string]string) (key, msg string) {
	if len(labels) > maxLabels {
		return "", fmt.Sprintf("at most %d labels per endpoint (got %d)", maxLabels, len(labels))
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		v := labels[k]
		if len(k) > maxLabelKey || !isLabelKey(k) {
			return k, fmt.Sprintf("label key %q must be 1..%d letters, digits, '.', '_', '-' or '/'", k, maxLabelKey)
		}
		if len(v) > maxLabelValue || hasControl(v) {
			return k, fmt.Sprintf("label %s: the value must be at most %d characters without control characters", k, maxLabelValue)
		}
	}
	return "", ""
}

// checkUnspecifiedEndpoints refuses 0.0.0.0 and :: as an endpoint: it is a
// listen address, not one anyone can connect to (and as a transfer address
// a peer would reach itself).
func checkUnspecifiedEndpoints(r *Rule) *apierror.Error {
	for i, ep := range r.Endpoints {
		if a, ok := ParseIPLiteral(ep.EndpointIP); ok && a.IsUnspecified() {
			msg := fmt.Sprintf("endpointIP %s is the unspecified address; name the engine's own address", ep.EndpointIP)
			return invalidField(epPath(i, fieldEndpointIP), msg, msg)
		}
	}
	return nil
}

// compilePairing copies the declared facts, the SGLang bootstrap port and
// the labels into the compiled endpoint.
func compilePairing(ep *Endpoint, se *spec.Endpoint) {
	se.PairFacts = PairFacts(ep)
	se.BootstrapPort = uint16(ep.BootstrapPort)
	if len(ep.Labels) > 0 {
		se.Labels = maps.Clone(ep.Labels)
	}
}

// PairFacts are the pairing facts ep declares, keyed by spec.Fact…; nil
// when it declares none.
func PairFacts(ep *Endpoint) map[string]string {
	facts := map[string]string{}
	if ep.KVConnector != "" {
		facts[spec.FactKVConnector] = ep.KVConnector
	}
	if ep.KVBlockSize != 0 {
		facts[spec.FactBlockSize] = strconv.Itoa(ep.KVBlockSize)
	}
	if ep.KVCacheDtype != "" {
		facts[spec.FactKVCacheDtype] = ep.KVCacheDtype
	}
	if ep.PairingProtocol != "" {
		facts[spec.FactPairingProtocol] = ep.PairingProtocol
	}
	if len(facts) == 0 {
		return nil
	}
	return facts
}

// isFactName: 1..maxFactLen letters, digits, '.', '_' or '-'.
func isFactName(s string) bool { return len(s) <= maxFactLen && isWord(s, "") }

// isLabelKey: a fact name's characters, and '/' (a label key may carry a
// prefix, as "example.com/zone").
func isLabelKey(s string) bool { return isWord(s, "/") }

// isWord reports a non-empty s of ASCII letters, digits, '.', '_', '-'
// and the bytes in extra.
func isWord(s, extra string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' || strings.IndexByte(extra, c) >= 0) {
			return false
		}
	}
	return true
}

func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return true
		}
	}
	return false
}
