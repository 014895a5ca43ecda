package rules

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/spec"
)

// Wire values the cross-field pass and the compiler interpret.
const (
	modeFullProxy  = 4
	modeDSR        = 3
	modeHostOneArm = 5

	protoTCP  = "tcp"
	protoUDP  = "udp"
	protoSCTP = "sctp"
	protoICMP = "icmp"
	protoNone = "none"

	probeNone  = "none"
	probeHTTP  = "http"
	probeHTTPS = "https"
	probeTCP   = "tcp"
	probeUDP   = "udp"
	probeSCTP  = "sctp"
	probePing  = "ping"

	pathMatchDisabled = "disabled"
	pathMatchPrefix   = "prefix"
	pathMatchExact    = "exact"

	backendHTTP1 = "http1"
	backendHTTP2 = "http2"
	backendBoth  = "both"

	sessionCookiePrefix = "cookie:"
	sessionQueryPrefix  = "query:"
	sessionBasicAuth    = "basic-auth"

	hashSHA256CBOR      = "sha256_cbor"
	hashXXHashCBOR      = "xxhash_cbor"
	hashSHA256SGLang    = "sha256_sglang"
	hashBlockhashTRTLLM = "blockhash_trtllm"

	kvModeZMQ        = 1
	kvModeNATS       = 2
	kvModeSingleRole = 3

	defaultKVZmqPort   = 5557
	defaultKVBlockSize = 16
)

// engineHashAlgos is LoxiLB's kvEngineAlgoTable; the first entry is the
// engine's default algorithm.
var engineHashAlgos = map[spec.Engine][]string{
	spec.EngineVLLM:   {hashSHA256CBOR, hashXXHashCBOR},
	spec.EngineSGLang: {hashSHA256SGLang},
	spec.EngineTRTLLM: {hashBlockhashTRTLLM},
}

// engineOf resolves kvEngineType ("" ≡ vllm).
func engineOf(sa *ServiceArguments) spec.Engine {
	if sa.KVEngineType == "" {
		return spec.EngineVLLM
	}
	return spec.Engine(sa.KVEngineType)
}

// crossCheck is one named rule of the ordered cross-field pass.
type crossCheck struct {
	name string
	run  func(*Rule) *apierror.Error
}

// crossChecks run in order after the field pass; the first failure wins.
// LoxiLB's own rows (reference §3.1) come first, in LoxiLB's order and with
// its exact result text, so a body LoxiLB rejects is rejected here for the
// same reason; infergate's extra restrictions follow.
var crossChecks = []crossCheck{
	{"row2-private-ip", checkPrivateIP},
	{"row4-probe", checkProbe},
	{"row6-icmp-port", checkICMPPort},
	{"row7-ppv2-tcp", checkPPv2Proto},
	{"row8-protocol", checkProtocolKnown},
	{"row9-secondary-ips", checkSecondaryIPs},
	{"row10-n3-udp", checkN3UDP},
	{"row11-port-range", checkPortRange},
	{"row12-hostonearm-vip", checkHostOneArm},
	{"row13-endpoints", checkEndpointAddrs},
	{"row14-sel-fullproxy", checkSelFullProxy},
	{"row15-pd-fullproxy", checkPDFullProxy},
	{"row16-pd-roles", checkPDRoles},
	{"row17-cache-aware-pd", checkCacheAwarePD},
	{"row18-kv3-no-pd", checkKV3NoPD},
	{"row19-kv3-fullproxy", checkKV3FullProxy},
	{"row20-kv1-pd", checkKV1PD},
	{"row24-hash-engine", checkHashEngine},
	{"row25-bootstrap-port", checkBootstrapPort},
	{"row26-trtllm-kv-mode", checkTRTLLMKVMode},
	{"row27-trtllm-zmq", checkTRTLLMZmq},
	{"row28-trtllm-dp", checkTRTLLMDP},
	{"row34-dsr-sel", checkDSRSel},
	// infergate restrictions beyond LoxiLB.
	{"mode-fullproxy-only", checkModeServed},
	{"protocol-tcp-only", checkProtocolServed},
	{"classic-knobs", checkClassicKnobs},
	{"no-port-ranges", checkNoPortRange},
	{"sel-served", checkSelServed},
	{"chwbl-single-pool", checkCHWBLSinglePool},
	{"chwbl-dead-config", checkCHWBLDeadConfig},
	{"kv-nats-mode", checkKVNATS},
	{"llamacpp-limits", checkLlamaCpp},
	{"kv-zmq-port-span", checkZmqSpan},
	{"duplicate-endpoints", checkDuplicateEndpoints},
	{"nixl-port-vllm-only", checkNixlVLLM},
	{"unspecified-endpoint", checkUnspecifiedEndpoints}, // pairing.go
	{"pd-pairing", checkPairing},                        // pairing.go
	{"pd-policies", checkPDPolicies},                    // pdpolicy.go
	{"session-header", checkSessionHeader},
	{"probe-type-served", checkProbeServed},
	{"path-match", checkPathMatch},
	{"backend-protocol", checkBackendProtocol},
	// LoxiLB compatibility: loxilb_checks.go.
	{"annotations", checkAnnotations},
	{"secondary-vips", checkSecondaryVIPs},
	{"endpoint-probes", checkEndpointProbes},
	{"allowed-paths", checkAllowedPaths}, // surface.go
	{"tls", checkTLS},                    // tls.go
	// Tenant controls.
	{"api-key-auth", checkAPIKeyAuth},
	// Engine self-registration: selector.go.
	{"endpoint-selector", checkEndpointSelector},
	// Engine signals: enginemetrics.go.
	{"engine-metrics-path", checkEngineMetricsPath},
	// Names that cannot forge log lines, endpoints that are not the
	// gateway itself: name.go, selfloop.go.
	{"name-printable", checkName},
	{"endpoint-not-own-vip", checkEndpointNotOwnVIP},
}

// api_key_auth values (LoxiLB's).
const (
	APIKeyAuthRequired = "required"
	APIKeyAuthDisabled = "disabled"
)

// checkAPIKeyAuth: api_key_auth is "", "required" or "disabled".
func checkAPIKeyAuth(r *Rule) *apierror.Error {
	switch r.ServiceArguments.APIKeyAuth {
	case "", APIKeyAuthRequired, APIKeyAuthDisabled:
		return nil
	}
	msg := `api_key_auth must be "required" or "disabled" (absent: keys follow sse_mode and --sse-mode-enforces-keys)`
	return apierror.BadRequest(apierror.CodeInvalidField, "serviceArguments.api_key_auth", msg, msg)
}

func crossPass(r *Rule) error {
	for _, c := range crossChecks {
		if err := c.run(r); err != nil {
			return err
		}
	}
	return nil
}

// Constructors: result is LoxiLB's text (or our own when LoxiLB has none).
func invalidField(field, result, msg string) *apierror.Error {
	return apierror.BadRequest(apierror.CodeInvalidField, field, result, msg)
}

func invalidCombo(field, result, msg string) *apierror.Error {
	return apierror.BadRequest(apierror.CodeInvalidCombo, field, result, msg)
}

func unsupported(field, msg string) *apierror.Error {
	return apierror.BadRequest(apierror.CodeUnsupported, field, msg, msg)
}

func checkPrivateIP(r *Rule) *apierror.Error {
	if p := r.ServiceArguments.PrivateIP; p != "" {
		if _, ok := ParseIPLiteral(p); !ok {
			return invalidField(saPath(fieldPrivateIP), "malformed-service privateIP error",
				fmt.Sprintf("privateIP %q is not an IP address", p))
		}
	}
	return nil
}

func checkProbe(r *Rule) *apierror.Error {
	sa := &r.ServiceArguments
	switch sa.ProbeType {
	case "", probeNone, probePing:
		if sa.ProbePort != 0 && !(sa.ProbeType == "" && sa.Monitor) {
			return invalidCombo(saPath(fieldProbePort), "malformed-service-pport error",
				fmt.Sprintf("probeport %d is set but probetype %q sends no port probe", sa.ProbePort, sa.ProbeType))
		}
	case probeTCP, probeUDP, probeSCTP, probeHTTP, probeHTTPS:
		// probeport 0 means "the endpoint's own port" in infergate.
	default:
		return invalidField(saPath(fieldProbeType), "malformed-service-ptype error",
			fmt.Sprintf("probetype %q is not one of http, https, tcp, none", sa.ProbeType))
	}
	return nil
}

func checkICMPPort(r *Rule) *apierror.Error {
	if r.ServiceArguments.Protocol == protoICMP && r.ServiceArguments.Port != 0 {
		return invalidCombo(saPath(fieldPort), "malformed-service error", "icmp rules must have port 0")
	}
	return nil
}

func checkPPv2Proto(r *Rule) *apierror.Error {
	if r.ServiceArguments.ProxyProtocolV2 && r.ServiceArguments.Protocol != protoTCP {
		return invalidCombo(saPath(fieldProxyProtocolV2), "proxy-proto-v2 not tcp service error",
			"proxyprotocolv2 needs a tcp service")
	}
	return nil
}

func checkProtocolKnown(r *Rule) *apierror.Error {
	switch r.ServiceArguments.Protocol {
	case protoTCP, protoUDP, protoSCTP, protoICMP, protoNone:
		return nil
	}
	return invalidField(saPath(fieldProtocol), "malformed-proto error",
		fmt.Sprintf("protocol %q is not one of tcp, udp, sctp, icmp", r.ServiceArguments.Protocol))
}

func checkSecondaryIPs(r *Rule) *apierror.Error {
	if len(r.SecondaryIPs) == 0 {
		return nil
	}
	if r.ServiceArguments.Protocol != protoSCTP {
		return invalidCombo(fieldSecondaryIPs, "secondaryIP-args error", "secondaryIPs are for sctp services only")
	}
	if len(r.SecondaryIPs) > 3 {
		return invalidField(fieldSecondaryIPs, "secondaryIP-args len error", "at most 3 secondaryIPs")
	}
	for i, s := range r.SecondaryIPs {
		if _, ok := ParseIPLiteral(s.SecondaryIP); !ok {
			return invalidField(fmt.Sprintf("%s[%d].%s", fieldSecondaryIPs, i, fieldSecondaryIP),
				"malformed-secIP error", fmt.Sprintf("secondaryIP %q is not an IP address", s.SecondaryIP))
		}
	}
	return nil
}

func checkN3UDP(r *Rule) *apierror.Error {
	if r.ServiceArguments.Sel == 6 && r.ServiceArguments.Protocol != protoUDP {
		return invalidCombo(saPath(fieldSel), "non-udp-n3-args error", "sel 6 (n3) needs a udp service")
	}
	return nil
}

func checkPortRange(r *Rule) *apierror.Error {
	sa := &r.ServiceArguments
	if sa.PortMax != 0 && sa.PortMax < sa.Port {
		return invalidCombo(saPath(fieldPortMax), "serv-port-args range error",
			fmt.Sprintf("portMax %d is below port %d", sa.PortMax, sa.Port))
	}
	return nil
}

func checkHostOneArm(r *Rule) *apierror.Error {
	if r.ServiceArguments.Mode != modeHostOneArm {
		return nil
	}
	if vip, _ := ParseIPLiteral(r.ServiceArguments.ExternalIP); !vip.IsUnspecified() {
		return invalidCombo(saPath(fieldExternalIP), "hostarm-args error",
			"mode 5 (hostonearm) needs an unspecified VIP (0.0.0.0 or ::)")
	}
	return nil
}

func checkEndpointAddrs(r *Rule) *apierror.Error {
	sa := &r.ServiceArguments
	vip, _ := ParseIPLiteral(sa.ExternalIP)
	for i, ep := range r.Endpoints {
		a, _ := ParseIPLiteral(ep.EndpointIP)
		if vip.Unmap().Is4() && !a.Unmap().Is4() {
			return invalidCombo(epPath(i, fieldEndpointIP), "malformed-service nat46 error",
				fmt.Sprintf("IPv6 endpoint %s behind IPv4 VIP %s (nat46) is not supported", ep.EndpointIP, sa.ExternalIP))
		}
		if sa.Protocol == protoICMP && ep.TargetPort != 0 {
			return invalidCombo(epPath(i, fieldTargetPort), "malformed-service error", "icmp endpoints must have targetPort 0")
		}
		if sa.Mode == modeDSR && ep.TargetPort != sa.Port {
			return invalidCombo(epPath(i, fieldTargetPort), "malformed-service dsr-port error",
				"dsr endpoints must use the service port")
		}
	}
	return nil
}

var fullProxySelNames = map[int]string{5: "n2", 8: "chwbl", 9: "gpu-aware", 10: "wrr-hash"}

func checkSelFullProxy(r *Rule) *apierror.Error {
	sa := &r.ServiceArguments
	if n, ok := fullProxySelNames[sa.Sel]; ok && sa.Mode != modeFullProxy {
		res := fmt.Sprintf("sel=%s(%d) requires mode=fullproxy (no L4 datapath selector)", n, sa.Sel)
		return invalidCombo(saPath(fieldSel), res, res)
	}
	return nil
}

func checkPDFullProxy(r *Rule) *apierror.Error {
	if r.ServiceArguments.PDDisaggMode && r.ServiceArguments.Mode != modeFullProxy {
		return invalidCombo(saPath(fieldPDDisaggMode), "pd-disagg requires mode=fullproxy",
			"pd_disagg_mode needs mode 4 (fullproxy)")
	}
	return nil
}

func checkPDRoles(r *Rule) *apierror.Error {
	if !r.ServiceArguments.PDDisaggMode || r.EndpointSelector != nil { // selector: roles checked per registration

		return nil
	}
	var prefill, decode bool
	for _, ep := range r.Endpoints {
		prefill = prefill || ep.EPRole == int(spec.RolePrefill)
		decode = decode || ep.EPRole == int(spec.RoleDecode)
	}
	if !prefill || !decode {
		res := "pd-disagg requires at least 1 prefill (ep_role=1) and 1 decode (ep_role=2) endpoint"
		return invalidCombo(fieldEndpoints, res, res)
	}
	return checkPDRoleWeights(r)
}

// checkPDRoleWeights rejects a P/D rule in which every prefill or every
// decode has weight 0: weight 0 drains an endpoint, so such a rule could
// never serve a split request and would never be ready. The field named is
// the first endpoint of the role without weight.
func checkPDRoleWeights(r *Rule) *apierror.Error {
	for _, role := range [...]struct {
		role int
		name string
	}{{int(spec.RolePrefill), "prefill (ep_role=1)"}, {int(spec.RoleDecode), "decode (ep_role=2)"}} {
		first, weighted := -1, false
		for i, ep := range r.Endpoints {
			if ep.EPRole != role.role {
				continue
			}
			if first < 0 {
				first = i
			}
			weighted = weighted || ep.Weight > 0
		}
		if first >= 0 && !weighted {
			res := "pd-disagg requires at least 1 " + role.name + " endpoint with weight > 0"
			return invalidCombo(epPath(first, fieldWeight), res,
				res+"; weight 0 drains an endpoint, so this rule could never serve a prefill/decode request")
		}
	}
	return nil
}

func checkCacheAwarePD(r *Rule) *apierror.Error {
	if r.ServiceArguments.PDCacheAwareMode && !r.ServiceArguments.PDDisaggMode {
		res := "pd-cache-aware requires pd_disagg_mode=true"
		return invalidCombo(saPath(fieldPDCacheAwareMode), res, res)
	}
	return nil
}

func checkKV3NoPD(r *Rule) *apierror.Error {
	if r.ServiceArguments.KVExactMode == kvModeSingleRole && r.ServiceArguments.PDDisaggMode {
		res := "kv-exact single-role mode is incompatible with pd-disagg (use kvExactMode=1 for P/D)"
		return invalidCombo(saPath(fieldKVExactMode), res, res)
	}
	return nil
}

func checkKV3FullProxy(r *Rule) *apierror.Error {
	if r.ServiceArguments.KVExactMode == kvModeSingleRole && r.ServiceArguments.Mode != modeFullProxy {
		res := "kv-exact single-role mode requires mode=fullproxy"
		return invalidCombo(saPath(fieldKVExactMode), res, res)
	}
	return nil
}

func checkKV1PD(r *Rule) *apierror.Error {
	if r.ServiceArguments.KVExactMode == kvModeZMQ && !r.ServiceArguments.PDDisaggMode {
		res := "kv-exact zmq mode requires pd_disagg_mode=true (use kvExactMode=3 for a single pool)"
		return invalidCombo(saPath(fieldKVExactMode), res, res)
	}
	return nil
}

func checkHashEngine(r *Rule) *apierror.Error {
	sa := &r.ServiceArguments
	if sa.KVHashAlgo == "" {
		return nil
	}
	eng := engineOf(sa)
	algos, ok := engineHashAlgos[eng]
	if !ok { // llamacpp: handled by checkLlamaCpp with its own text
		return nil
	}
	for _, a := range algos {
		if a == sa.KVHashAlgo {
			return nil
		}
	}
	res := fmt.Sprintf("kv-hash-algo %q is incompatible with kv-engine-type %q (omit kvHashAlgo to take the engine default %q)",
		sa.KVHashAlgo, string(eng), algos[0])
	return invalidCombo(saPath(fieldKVHashAlgo), res, res)
}

func checkBootstrapPort(r *Rule) *apierror.Error {
	sa := &r.ServiceArguments
	if sa.PDBootstrapPort != 0 && !(sa.PDDisaggMode && engineOf(sa) == spec.EngineSGLang) {
		res := "pd-bootstrap-port requires pd_disagg_mode=true and kv-engine-type sglang"
		return invalidCombo(saPath(fieldPDBootstrapPort), res, res)
	}
	return nil
}

func checkTRTLLMKVMode(r *Rule) *apierror.Error {
	sa := &r.ServiceArguments
	if engineOf(sa) == spec.EngineTRTLLM && sa.KVExactMode != 0 && sa.KVExactMode != kvModeZMQ && sa.KVExactMode != kvModeSingleRole {
		res := "kv-engine-type trtllm supports kvExactMode 1 or 3 (HTTP-polled event plane)"
		return invalidCombo(saPath(fieldKVExactMode), res, res)
	}
	return nil
}

func checkTRTLLMZmq(r *Rule) *apierror.Error {
	sa := &r.ServiceArguments
	if engineOf(sa) == spec.EngineTRTLLM && sa.KVZmqPort != 0 && sa.KVZmqPort != defaultKVZmqPort {
		res := "kvZmqPort is meaningless for kv-engine-type trtllm (events ride the endpoint's serving port)"
		return invalidCombo(saPath(fieldKVZmqPort), res, res)
	}
	return nil
}

func checkTRTLLMDP(r *Rule) *apierror.Error {
	sa := &r.ServiceArguments
	if engineOf(sa) == spec.EngineTRTLLM && sa.KVDpRankCount > 1 {
		res := "kvDpRankCount is meaningless for kv-engine-type trtllm (no client-visible DP ranks)"
		return invalidCombo(saPath(fieldKVDpRankCount), res, res)
	}
	return nil
}

func checkDSRSel(r *Rule) *apierror.Error {
	if r.ServiceArguments.Mode == modeDSR && r.ServiceArguments.Sel != int(spec.SelSourceHash) {
		res := "Error: Only Hash Selection criteria allowed for DSR mode"
		return invalidCombo(saPath(fieldSel), res, res)
	}
	return nil
}

func checkModeServed(r *Rule) *apierror.Error {
	if m := r.ServiceArguments.Mode; m != modeFullProxy {
		return unsupported(saPath(fieldMode), fmt.Sprintf(
			"mode %d is not served: infergate is an L7 proxy and serves only mode 4 (fullproxy)", m))
	}
	return nil
}

func checkProtocolServed(r *Rule) *apierror.Error {
	if p := r.ServiceArguments.Protocol; p != protoTCP {
		return unsupported(saPath(fieldProtocol), fmt.Sprintf(
			"protocol %q is not served: infergate proxies HTTP over tcp only", p))
	}
	return nil
}

func checkClassicKnobs(r *Rule) *apierror.Error {
	sa := &r.ServiceArguments
	switch {
	case sa.PrivateIP != "":
		return unsupported(saPath(fieldPrivateIP), "privateIP (NAT'd private VIP) is an L4 feature infergate does not serve")
	case sa.Oper != 0:
		return unsupported(saPath(fieldOper), "oper (attach/detach endpoints) is not supported; re-POST the full endpoint list")
	case sa.BGP:
		return unsupported(saPath(fieldBGP), "bgp VIP export is not served by infergate")
	case sa.SNAT:
		return unsupported(saPath(fieldSNAT), "snat is an L4 feature infergate does not serve")
	case sa.Egress:
		return unsupported(saPath(fieldEgress), "egress is an L4 feature infergate does not serve")
	case sa.ProxyProtocolV2:
		return unsupported(saPath(fieldProxyProtocolV2), "proxyprotocolv2 is not sent by infergate")
	case len(r.SecondaryIPs) > 0:
		return unsupported(fieldSecondaryIPs, "secondaryIPs (SCTP multi-homing) are not served by infergate")
	case len(r.AllowedSources) > 0:
		return unsupported(fieldAllowedSources, "allowedSources are not enforced by infergate; filter sources in front of it")
	}
	return nil
}

func checkNoPortRange(r *Rule) *apierror.Error {
	sa := &r.ServiceArguments
	if sa.PortMax != 0 && sa.PortMax != sa.Port {
		return unsupported(saPath(fieldPortMax), "port ranges (portMax) are not served: one rule listens on one port")
	}
	return nil
}

func checkSelServed(r *Rule) *apierror.Error {
	switch s := spec.Selector(r.ServiceArguments.Sel); s {
	case spec.SelRoundRobin, spec.SelSourceHash, spec.SelWeightedRR, spec.SelPersist, spec.SelLeastConn,
		spec.SelCHWBL, spec.SelWeightedCHWBL:
		return nil
	default:
		return unsupported(saPath(fieldSel), fmt.Sprintf(
			"sel %d is not served; use 0 (rr), 1 (source hash), 2 (weighted rr), 3 (persistence), 4 (least connections), 8 (chwbl) or 10 (weighted chwbl)", int(s)))
	}
}

// checkCHWBLSinglePool rejects sel 8/10 on P/D rules: a P/D rule's prefill
// and decode are picked by the P/D ladder (sessions, prefix affinity,
// KV-exact, load), which already does what consistent hashing would, so a
// ring there would be configuration that silently does nothing.
func checkCHWBLSinglePool(r *Rule) *apierror.Error {
	sa := &r.ServiceArguments
	if s := spec.Selector(sa.Sel); (s == spec.SelCHWBL || s == spec.SelWeightedCHWBL) && sa.PDDisaggMode {
		msg := fmt.Sprintf("sel %d (%s) is for single-pool rules; P/D rules pick endpoints with the P/D ladder "+
			"(use pd_cache_aware_mode for prefix affinity)", int(s), s)
		return invalidCombo(saPath(fieldSel), msg, msg)
	}
	return nil
}

func checkCHWBLDeadConfig(r *Rule) *apierror.Error {
	sa := &r.ServiceArguments
	if s := spec.Selector(sa.Sel); s == spec.SelCHWBL || s == spec.SelWeightedCHWBL {
		return nil
	}
	field := ""
	switch {
	case sa.CHWBLPrefixHashLevel != nil:
		field = fieldCHWBLPrefixHashLevel
	case sa.CHWBLPrefixHashFlags != nil:
		field = fieldCHWBLPrefixHashFlags
	case sa.CHWBLMeanLoadFactor != 0:
		field = fieldCHWBLMeanLoadFactor
	case sa.CHWBLReplication != 0:
		field = fieldCHWBLReplication
	case sa.CHWBLEnableCacheSalt != nil:
		field = fieldCHWBLEnableCacheSalt
	default:
		return nil
	}
	msg := fmt.Sprintf("%s only applies to sel 8/10 (chwbl); this rule uses sel %d", field, sa.Sel)
	return invalidCombo(saPath(field), msg, msg)
}

func checkKVNATS(r *Rule) *apierror.Error {
	if r.ServiceArguments.KVExactMode == kvModeNATS {
		return unsupported(saPath(fieldKVExactMode), "kvExactMode 2 (NATS) is not supported; use 1 (P/D) or 3 (single pool)")
	}
	return nil
}

// checkLlamaCpp mirrors the loxicmd llamacpp rejections server-side:
// llama.cpp is served on the plain path only (no P/D, no exact KV).
func checkLlamaCpp(r *Rule) *apierror.Error {
	sa := &r.ServiceArguments
	if engineOf(sa) != spec.EngineLlamaCpp {
		return nil
	}
	switch {
	case sa.PDDisaggMode:
		return unsupported(saPath(fieldPDDisaggMode), "pd_disagg_mode is unsupported for kv-engine-type llamacpp")
	case sa.KVExactMode != 0:
		return unsupported(saPath(fieldKVExactMode), "kvExactMode is unsupported for kv-engine-type llamacpp")
	case sa.KVZmqPort != 0 && sa.KVZmqPort != defaultKVZmqPort:
		res := "kvZmqPort is not used by llamacpp; omit it"
		return invalidCombo(saPath(fieldKVZmqPort), res, res)
	case sa.KVDpRankCount > 1:
		res := "kvDpRankCount is not used by llamacpp; omit it"
		return invalidCombo(saPath(fieldKVDpRankCount), res, res)
	case sa.KVBlockSize != 0 && sa.KVBlockSize != defaultKVBlockSize:
		res := "kvBlockSize is not used by llamacpp; omit it"
		return invalidCombo(saPath(fieldKVBlockSize), res, res)
	case sa.KVHashAlgo != "":
		return unsupported(saPath(fieldKVHashAlgo), "kvHashAlgo is unsupported for kv-engine-type llamacpp; omit it")
	}
	return nil
}

func checkZmqSpan(r *Rule) *apierror.Error {
	sa := &r.ServiceArguments
	port, ranks := sa.KVZmqPort, sa.KVDpRankCount
	if port == 0 {
		port = defaultKVZmqPort
	}
	if ranks == 0 {
		ranks = 1
	}
	if port+ranks-1 > 65535 {
		res := "kvZmqPort + kvDpRankCount - 1 must be <= 65535"
		return invalidCombo(saPath(fieldKVZmqPort), res, res)
	}
	return nil
}

func checkDuplicateEndpoints(r *Rule) *apierror.Error {
	seen := make(map[netip.AddrPort]int, len(r.Endpoints))
	for i, ep := range r.Endpoints {
		a, _ := ParseIPLiteral(ep.EndpointIP)
		ap := netip.AddrPortFrom(a, uint16(ep.TargetPort))
		if j, dup := seen[ap]; dup {
			msg := fmt.Sprintf("endpoint %s is listed twice (endpoints[%d] and endpoints[%d])", ap, j, i)
			return invalidField(epPath(i, fieldEndpointIP), msg, msg)
		}
		seen[ap] = i
	}
	return nil
}

func checkNixlVLLM(r *Rule) *apierror.Error {
	if engineOf(&r.ServiceArguments) == spec.EngineVLLM {
		return nil
	}
	for i, ep := range r.Endpoints {
		if ep.NixlPort != 0 {
			msg := fmt.Sprintf("nixl_port is a vLLM NIXL side channel; kv-engine-type %q does not use it", r.ServiceArguments.KVEngineType)
			return invalidCombo(epPath(i, fieldNixlPort), msg, msg)
		}
	}
	return nil
}

func checkSessionHeader(r *Rule) *apierror.Error {
	sa := &r.ServiceArguments
	if sa.SessionHeaderName == "" {
		return nil
	}
	if _, err := parseSession(sa.SessionHeaderName); err != nil {
		return err
	}
	if s := spec.Selector(sa.Sel); s != spec.SelRoundRobin && s != spec.SelPersist {
		msg := fmt.Sprintf("session_header_name only applies to sel 0 or 3; this rule uses sel %d", sa.Sel)
		return invalidCombo(saPath(fieldSessionHeader), msg, msg)
	}
	return nil
}

// parseSession parses session_header_name: a header token, cookie:<name> or
// query:<name>. basic-auth keys sessions on credentials, which infergate does
// not inspect.
func parseSession(s string) (spec.SessionKey, *apierror.Error) {
	field := saPath(fieldSessionHeader)
	switch {
	case s == "":
		return spec.SessionKey{Source: spec.SessionFromSourceIP}, nil
	case strings.EqualFold(s, sessionBasicAuth):
		return spec.SessionKey{}, unsupported(field, "session_header_name basic-auth is not supported; use a header, cookie:<name> or query:<name>")
	case strings.HasPrefix(s, sessionCookiePrefix):
		if n := s[len(sessionCookiePrefix):]; isToken(n) {
			return spec.SessionKey{Source: spec.SessionFromCookie, Name: n}, nil
		}
	case strings.HasPrefix(s, sessionQueryPrefix):
		if n := s[len(sessionQueryPrefix):]; n != "" && !strings.ContainsAny(n, "&=#? ") {
			return spec.SessionKey{Source: spec.SessionFromQuery, Name: n}, nil
		}
	case isToken(s):
		return spec.SessionKey{Source: spec.SessionFromHeader, Name: s}, nil
	}
	msg := fmt.Sprintf("session_header_name %q is not a header name, cookie:<name> or query:<name>", s)
	return spec.SessionKey{}, invalidField(field, msg, msg)
}

// isToken reports whether s is an RFC 9110 token (header or cookie name).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

func checkProbeServed(r *Rule) *apierror.Error {
	switch p := r.ServiceArguments.ProbeType; p {
	case probeUDP, probeSCTP, probePing:
		return unsupported(saPath(fieldProbeType), fmt.Sprintf("probetype %q is not served; use http, https, tcp or none", p))
	}
	return nil
}

func checkPathMatch(r *Rule) *apierror.Error {
	sa := &r.ServiceArguments
	switch sa.PathMatchMode {
	case "", pathMatchDisabled:
	case pathMatchPrefix, pathMatchExact:
		if sa.PathPrefix == "" {
			msg := fmt.Sprintf("path_match_mode %q needs a path_prefix", sa.PathMatchMode)
			return invalidCombo(saPath(fieldPathPrefix), msg, msg)
		}
	default:
		msg := fmt.Sprintf("%s in body should be one of [disabled prefix exact]", saPath(fieldPathMatchMode))
		return invalidField(saPath(fieldPathMatchMode), msg, msg)
	}
	if sa.PathPrefix != "" && sa.PathPrefix[0] != '/' {
		msg := fmt.Sprintf("path_prefix %q must start with /", sa.PathPrefix)
		return invalidField(saPath(fieldPathPrefix), msg, msg)
	}
	return nil
}

func checkBackendProtocol(r *Rule) *apierror.Error {
	switch p := r.ServiceArguments.BackendProtocol; p {
	case "", backendHTTP1:
		return nil
	case backendHTTP2, backendBoth:
		return unsupported(saPath(fieldBackendProtocol), fmt.Sprintf("backend_protocol %q is not served; infergate speaks http1 to engines", p))
	default:
		msg := fmt.Sprintf("%s in body should be one of [http1 http2 both]", saPath(fieldBackendProtocol))
		return invalidField(saPath(fieldBackendProtocol), msg, msg)
	}
}
