package rules

import (
	"bytes"
	"fmt"
	"reflect"

	"github.com/infergate/infergate/apierror"
)

// LoxiLB model keys that are not infergate model fields. Every
// field of LoxiLB's LoadbalanceEntry is known to the decoder: the ones
// infergate serves are model fields; the rest are listed here with the
// reason they are refused, so a LoxiLB body gets a 400 unsupported that
// says why instead of an unknown_field that reads like a typo. A key's
// neutral value (null, false, 0, "", [], {} or a listed default such as
// kvExactApiMode "both") asks for nothing and is accepted and dropped,
// so LoxiLB GET dumps and loxicmd bodies re-POST. Output-only keys of
// LoxiLB's GET are always dropped. A model field of the same name (added
// later) shadows its entry here.

// extraField is one LoxiLB key the model does not carry.
type extraField struct {
	name   string   // LoxiLB's spelling
	reason string   // why it is not served (empty for output-only)
	output bool     // GET-only: accepted and dropped whatever its value
	allow  []string // string values besides the neutral ones that ask for nothing
}

func unsupportedKey(name, reason string, allow ...string) extraField {
	return extraField{name: name, reason: reason, allow: allow}
}

func outputKey(name string) extraField { return extraField{name: name, output: true} }

const (
	reasonFC = "capacity admission (fc_*) is not served by infergate"
	// Only the three certificate-store references reach this text: the
	// model's TLS fields shadow every other key listed with it.
	reasonTLS = "certificate-store references are not served: give the certificate files in mtls_backend"
)

// loxilbExtraKeys lists, per model struct, LoxiLB's keys that are not fields.
var loxilbExtraKeys = map[reflect.Type][]extraField{
	reflect.TypeFor[Rule]():             {outputKey("hw_bytes"), outputKey("hw_pkts"), outputKey("offload_state")},
	reflect.TypeFor[ServiceArguments](): serviceExtraKeys,
	reflect.TypeFor[Endpoint](): {
		unsupportedKey("httpVersion", "health probes always speak HTTP/1.1", "1.1"),
		unsupportedKey("domainName", "a probe Host/SNI override is not served; probes address the endpoint itself"),
		unsupportedKey("monitorAddress", "probing an address other than the endpoint's own is not served"),
	},
}

var serviceExtraKeys = []extraField{
	unsupportedKey("kvExactApiMode", "per-surface KV-exact restriction is not served; KV-exact rules serve completions and chat", "both"),
	unsupportedKey("kvModelProfile", "ModelPromptProfile binding is not served; KV-exact rules run profile-less"),
	unsupportedKey("timeoutMemberConnect", "a per-rule backend connect timeout is not served; the daemon's dial timeout applies"),
	unsupportedKey("timeoutMemberData", "a per-rule member idle timeout is not served; inactiveTimeOut bounds engine silence"),
	unsupportedKey("timeoutTcpInspect", "a per-rule header deadline is not served; the daemon's read-header timeout applies"),
	unsupportedKey("vip_qos_policy_id", "QoS policer association is a LoxiLB L4 feature infergate does not serve"),
	unsupportedKey("sockMapMode", "eBPF sockmap acceleration is not part of infergate", "disabled"),
	unsupportedKey("jwt_auth_profile", "JWT authentication profiles are not served by infergate"),
	unsupportedKey("pd_prefill_timeout_sec", "a per-rule prefill leg timeout is not served; the daemon's P/D options apply"),
	unsupportedKey("fc_mode", reasonFC, "off", "inherit"),
	unsupportedKey("fc_max_outstanding", reasonFC),
	unsupportedKey("fc_ep_max_inflight", reasonFC),
	unsupportedKey("fc_prefill_max_inflight", reasonFC),
	unsupportedKey("fc_decode_max_inflight", reasonFC),
	unsupportedKey("fc_max_queue_depth", reasonFC),
	unsupportedKey("fc_max_queue_wait_ms", reasonFC),
	unsupportedKey("fc_telemetry_stale_ms", reasonFC),
	unsupportedKey("fc_adaptive", reasonFC, "off", "inherit"),
	unsupportedKey("fc_warmup_ms", reasonFC),
	unsupportedKey("fc_ttft_target_ms", reasonFC),
	unsupportedKey("fc_tenant_max_share_pct", reasonFC),
	unsupportedKey("fc_expose_headers", reasonFC, "off", "inherit"),
	outputKey("fc_effective"),
	outputKey("backend_tls_effective"),
	// TLS keys (owned by the TLS feature; its model fields shadow these).
	unsupportedKey("alpn_protocols", reasonTLS),
	unsupportedKey("tls_ciphers", reasonTLS),
	unsupportedKey("tls_versions", reasonTLS),
	unsupportedKey("hsts_max_age", reasonTLS),
	unsupportedKey("hsts_include_subdomains", reasonTLS),
	unsupportedKey("hsts_preload", reasonTLS),
	unsupportedKey("mtls_frontend", reasonTLS),
	unsupportedKey("mtls_backend", reasonTLS),
	unsupportedKey("backend_ca_cert_id", reasonTLS),
	unsupportedKey("backend_client_cert_id", reasonTLS),
	unsupportedKey("backend_tls_server_name", reasonTLS),
}

// extraFieldsOf returns t's extra keys by lowercased name, minus any that
// are model fields of t.
func extraFieldsOf(t reflect.Type) map[string]extraField {
	xs := loxilbExtraKeys[t]
	if len(xs) == 0 {
		return nil
	}
	fields := map[string]bool{}
	for i := 0; i < t.NumField(); i++ {
		fields[lowerASCII(jsonName(t.Field(i)))] = true
	}
	m := make(map[string]extraField, len(xs))
	for _, x := range xs {
		if lk := lowerASCII(x.name); !fields[lk] {
			m[lk] = x
		}
	}
	return m
}

func jsonName(f reflect.StructField) string {
	name, _, _ := bytes.Cut([]byte(f.Tag.Get("json")), []byte(","))
	return string(name)
}

// check accepts raw (one complete JSON value) when it asks for nothing.
func (x extraField) check(raw []byte, path string) error {
	if x.output || neutralJSON(raw) {
		return nil
	}
	for _, a := range x.allow {
		if string(raw) == `"`+a+`"` {
			return nil
		}
	}
	msg := fmt.Sprintf("%s is not supported: %s", path, x.reason)
	return apierror.BadRequest(apierror.CodeUnsupported, path, msg, msg)
}

// neutralJSON reports whether raw is null, false, zero, "", [] or {}.
func neutralJSON(raw []byte) bool {
	raw = bytes.TrimSpace(raw)
	switch string(raw) {
	case "null", "false", `""`, "0", "-0":
		return true
	}
	if len(raw) >= 2 && (raw[0] == '[' || raw[0] == '{') {
		return len(bytes.TrimSpace(raw[1:len(raw)-1])) == 0
	}
	if len(raw) > 0 && (raw[0] == '-' || ('0' <= raw[0] && raw[0] <= '9')) {
		return len(bytes.Trim(raw, "-0.eE+")) == 0 // 0, 0.0, -0e3
	}
	return false
}
