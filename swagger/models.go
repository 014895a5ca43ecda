package swagger

import (
	"reflect"

	"github.com/infergate/infergate/rules"
)

// Definition names of the wire model: LoxiLB's, so generated clients for
// LoxiLB's swagger and ours share type names.
const (
	defEntry        = "LoadbalanceEntry"
	defServiceArgs  = "LoadbalanceServiceArguments"
	defEndpoint     = "LoadbalanceEndpoint"
	defSecondaryIP  = "LoadbalanceSecondaryIP"
	defAllowedSrc   = "LoadbalanceAllowedSource"
	defRuleStatus   = "LoadbalanceRuleStatus"
	defRuleList     = "LoadbalanceList"
	defSecondaryVIP = "LoadbalanceSecondaryVIP"
	// an infergate extension, hence not a Loadbalance… name.
	defEndpointSelector = "InfergateEndpointSelector"
)

func wireNames() map[reflect.Type]string {
	return map[reflect.Type]string{
		reflect.TypeOf(rules.Rule{}):             defEntry,
		reflect.TypeOf(rules.ServiceArguments{}): defServiceArgs,
		reflect.TypeOf(rules.Endpoint{}):         defEndpoint,
		reflect.TypeOf(rules.SecondaryIP{}):      defSecondaryIP,
		reflect.TypeOf(rules.AllowedSource{}):    defAllowedSrc,
		reflect.TypeOf(rules.RuleStatus{}):       defRuleStatus,
		reflect.TypeOf(rules.RuleList{}):         defRuleList,
		reflect.TypeOf(rules.SecondaryVIP{}):     defSecondaryVIP,
		reflect.TypeOf(rules.EndpointSelector{}): defEndpointSelector,
	}
}

func enum(vs ...interface{}) []interface{} { return vs }

// fieldNotes documents the fields an operator most needs to get right. Keys
// are "Definition.jsonName"; TestFieldNotesMatchModel fails on a stale key.
func fieldNotes() map[string]FieldNote {
	sa := func(n string) string { return defServiceArgs + "." + n }
	ep := func(n string) string { return defEndpoint + "." + n }
	return map[string]FieldNote{
		defEntry + ".serviceArguments": {Required: true},
		defEntry + ".endpoints":        {Description: "Backend engines, 1..32.", Min: ptrFloat(1), Max: ptrFloat(32), Required: true},
		defEntry + ".secondaryIPs":     {Description: "SCTP multi-homing addresses; accepted for LoxiLB compatibility, not served."},
		defEntry + ".allowedSources":   {Description: "Source prefixes allowed to reach the VIP."},

		sa("externalIP"): {Description: "Virtual IP (IPv4 or IPv6); part of the rule key.", Required: true},
		sa("port"):       {Description: "Service port; part of the rule key.", Min: ptrFloat(0), Max: ptrFloat(65535), Required: true},
		sa("portMax"):    {Description: "End of a port range (0 = single port).", Min: ptrFloat(0), Max: ptrFloat(65535)},
		sa("protocol"): {Description: "L4 protocol; part of the rule key. Served: tcp only (udp, sctp, icmp answer 400 unsupported).",
			Enum: enum("tcp", "udp", "sctp", "icmp"), Served: enum("tcp"), Required: true},
		sa("sel"): {Description: "Endpoint selector (LoxiLB's enum is 0..10). Served: 0 rr, 1 hash, 2 priority (weighted rr), 3 persist, 4 least-conn, " +
			"8 chwbl (prefix consistent hash, bounded loads), 10 weighted chwbl (8/10: single pools only); 5, 6, 7 and 9 answer 400 unsupported. " +
			"Under P/D only Tier 2 uses it.",
			Enum: enum(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10), Served: enum(0, 1, 2, 3, 4, 8, 10)},
		sa("mode"): {Description: "LoxiLB LB mode (0 DNAT, 1 onearm, 2 fullnat, 3 dsr, 4 fullproxy, 5 hostonearm). " +
			"Served: 4 (fullproxy) only; infergate is an L7 proxy and answers 400 unsupported for the L4 modes.",
			Enum: enum(0, 1, 2, 3, 4, 5), Served: enum(4)},
		sa("security"): {Description: "0 plain, 1 TLS termination, 2 end-to-end TLS. Immutable. Served: see x-infergate-served; " +
			"the others answer 400 unsupported.", Enum: enum(0, 1, 2), Served: enum(0)},
		sa("name"):            {Description: "Free label (not unique, not part of the key); DELETE by name removes every rule with it."},
		sa("block"):           {Description: "LoxiLB mark; part of the rule key."},
		sa("host"):            {Description: "HTTP Host to match; part of the rule key."},
		sa("path_prefix"):     {Description: "HTTP path to match; part of the rule key."},
		sa("path_match_mode"): {Description: "How path_prefix matches; part of the rule key.", Enum: enum("", "disabled", "prefix", "exact")},
		sa("model_name"):      {Description: "Model routed to this rule (body `model` / X-Model header); \"\" = any model. Part of the rule key."},
		sa("inactiveTimeOut"): {Description: "Idle timeout in seconds (0 = protocol default).", Min: ptrFloat(0), Max: ptrFloat(86400)},
		sa("probetype"):       {Description: "Active health probe type.", Enum: enum("", "tcp", "udp", "sctp", "http", "https", "ping", "none")},
		sa("probeport"):       {Description: "Probe port; required for tcp/udp/sctp/http/https probes.", Min: ptrFloat(0), Max: ptrFloat(65535)},
		sa("probereq"):        {Description: "HTTP probe path, e.g. /health."},
		sa("sse_mode"):        {Description: "Stream server-sent events without idle-timeout cuts."},
		sa("cb_enable"):       {Description: "Per-endpoint circuit breaker (always on for P/D rules)."},
		sa("session_header_name"): {Description: "Sticky-session key for sel 0/3: a header name, cookie:<name> or " +
			"query:<name>; empty = client IP."},
		sa("chwbl_prefix_hash_level"): {Description: "sel 8/10: how much of the prompt prefix is hashed.", Enum: enum(1, 2, 3), Default: 1},
		sa("chwbl_mean_load_factor"):  {Description: "sel 8/10: bounded-load cap in percent of the mean (0 = 175).", Min: ptrFloat(0), Max: ptrFloat(300)},
		sa("chwbl_replication"):       {Description: "sel 8/10: virtual nodes per endpoint (0 = 100).", Min: ptrFloat(0), Max: ptrFloat(1024)},
		sa("pd_disagg_mode"): {Description: "Prefill/decode disaggregation: each request runs a prefill leg then a decode leg " +
			"(dialect from kvEngineType). Needs mode 4 and at least one ep_role 1 and one ep_role 2 endpoint."},
		sa("pd_cache_aware_mode"):      {Description: "Tier 1 prefix-affinity routing of prefill; requires pd_disagg_mode."},
		sa("pd_session_ttl_sec"):       {Description: "Tier 0 sticky prefill/decode pair TTL in seconds (0 = 300).", Min: ptrFloat(0)},
		sa("pd_cache_threshold"):       {Description: "Tier 1 minimum prefix match percent (0 = 20).", Min: ptrFloat(0), Max: ptrFloat(100)},
		sa("pd_balance_abs_threshold"): {Description: "Tier 1 is bypassed when max-min active requests exceeds this (0 = 3).", Min: ptrFloat(0), Max: ptrFloat(255)},
		sa("allowed_paths"): {Description: "infergate extension: the paths this rule serves (exact, or a prefix ending in /*); " +
			"empty = every path and method is forwarded to the engine. Others get 404 path_not_allowed."},
		sa("engine_metrics_path"): {Description: "infergate extension: where each endpoint's Prometheus text is scraped for its queue, " +
			"running batch and KV usage (an absolute path; \"none\" = not scraped; empty = /metrics, TensorRT-LLM /prometheus/metrics)."},
		sa("admission_window"): {Description: "infergate extension: requests each endpoint may have in flight from this gateway (0 = no window); " +
			"when every endpoint is at its window requests wait in the gateway queue (priority classes, fair between tenants), then 503 worker_overload_protection_shed with Retry-After. " +
			"P/D rules: decodes and role-0 endpoints (a prefill only through its own admission_window).", Min: ptrFloat(0), Max: ptrFloat(65536)},
		sa("allow_admin_paths"): {Description: "infergate extension: forward the engine's admin APIs (/sleep, /collective_rpc, /flush_cache, " +
			"/update_weights_from_disk, /kv_cache_events, ...: the list of kvEngineType, every engine's when it is absent). " +
			"Default false: they answer 403 admin_path_denied, except one allowed_paths names exactly."},
		sa("pdBootstrapPort"): {Description: "SGLang --disaggregation-bootstrap-port (0 = 8998); only with P/D and kvEngineType sglang.", Min: ptrFloat(0), Max: ptrFloat(65535)},
		sa("kvExactMode"): {Description: "Tier 1.5 exact KV-cache routing: 0 off, 1 over the prefill endpoints of a P/D rule, " +
			"3 over a single pool (no P/D). LoxiLB's reserved 2 (NATS) is not served.", Enum: enum(0, 1, 3)},
		sa("kvEngineType"):  {Description: "Engine family behind the rule (\"\" = vllm). Immutable after create.", Enum: enum("", "vllm", "sglang", "trtllm", "llamacpp")},
		sa("kvZmqPort"):     {Description: "Base ZMQ PUB port of KV events on each endpoint (0 = 5557); DP rank r uses port+r.", Min: ptrFloat(0), Max: ptrFloat(65535)},
		sa("kvBlockSize"):   {Description: "Engine KV block size in tokens (0 = 16); must match the engine.", Min: ptrFloat(0)},
		sa("kvHashAlgo"):    {Description: "Block hash algorithm; omit to take the engine default.", Enum: enum("", "sha256_cbor", "xxhash_cbor", "sha256_sglang", "blockhash_trtllm")},
		sa("kvDpRankCount"): {Description: "Data-parallel ranks per endpoint (0 = 1).", Min: ptrFloat(0), Max: ptrFloat(8)},
		sa("kvWarmupSec"):   {Description: "Seconds after subscribing before KV-exact routing trusts the inventory.", Min: ptrFloat(0)},

		// Edge hardening.
		sa("connectionLimit"): {Description: "Cap on open client connections to this VIP:port (0 = none; rules sharing the address share the smallest non-zero cap). Connections over it are closed at accept.", Min: ptrFloat(0), Max: ptrFloat(10000000)},

		ep("endpointIP"): {Description: "Backend IP address.", Required: true},
		ep("targetPort"): {Description: "Backend port.", Min: ptrFloat(1), Max: ptrFloat(65535), Required: true},
		ep("weight"):     {Description: "Selection weight; 0 drains (no new requests, in-flight ones finish).", Min: ptrFloat(0), Max: ptrFloat(255), Required: true},
		ep("ep_role"):    {Description: "0 any, 1 prefill (TRT-LLM context), 2 decode (TRT-LLM generation).", Enum: enum(0, 1, 2)},
		ep("nixl_port"):  {Description: "vLLM NIXL side-channel port of this worker (0 = targetPort).", Min: ptrFloat(0), Max: ptrFloat(65535)},
		ep("backup"):     {Description: "Standby endpoint, used only when no primary is available."},
		ep("state"): {Description: "Output only, LoxiLB's words: active (takes new requests) or inactive; the finer state is in health.",
			Enum: enum("active", "inactive"), ReadOnly: true},
		ep("counter"): {Description: "Output only, LoxiLB's packets:bytes — here requests:bytes: requests that reached the engine " +
			"(each P/D leg on its endpoint) and body bytes relayed (request bodies sent plus response bodies returned).", ReadOnly: true},

		// LoxiLB compatibility.
		defEntry + ".secondaryVIPs": {Description: "Further addresses the rule is served on (same port); each must be local " +
			"and must not collide with another rule's address and route, like externalIP."},
		defSecondaryVIP + ".address":  {Description: "Secondary VIP (IPv4 or IPv6).", Required: true},
		defSecondaryVIP + ".subnetId": {Description: "Octavia subnet id; stored and returned verbatim."},
		defSecondaryVIP + ".portId":   {Description: "Octavia port id; stored and returned verbatim."},
		defSecondaryVIP + ".proto":    {Description: "Protocol hint; stored and returned verbatim."},
		sa("adminStateUp"): {Description: "false keeps the rule configured but its addresses answer 503 admin_down; " +
			"absent = true. GET always shows it.", Default: true},
		sa("annotations"):   {Description: "Opaque key/value pairs stored and returned verbatim (at most 32 keys, values up to 256 characters)."},
		ep("httpMethod"):    {Description: "This endpoint's HTTP probe method (GET or HEAD); needs probetype http/https.", Enum: enum("", "GET", "HEAD")},
		ep("urlPath"):       {Description: "This endpoint's HTTP probe path (overrides probereq); needs probetype http/https."},
		ep("expectedCodes"): {Description: "Status codes this endpoint's probe accepts: \"200\", \"200,202\" or \"200-204\" (default any 2xx)."},
		ep("subnetId"):      {Description: "Octavia member subnet id; stored and returned verbatim."},

		// P/D pairing (infergate extensions, docs/datapath.md "Pairing").
		sa("pd_pairing_mode"): {Description: "P/D rules: lenient (default; legs whose transfer facts are unknown pair) or strict " +
			"(both legs of a pair must declare pairing_protocol or kv_connector).", Enum: enum("", "lenient", "strict")},
		sa("pd_prefill_policy"): {Description: "P/D rules: how a prefill is chosen when no affinity tier did: least_load (default), round_robin, " +
			"power_of_two, or cache_aware (prefix affinity first, then least load).", Enum: enum("", "least_load", "round_robin", "power_of_two", "cache_aware")},
		sa("pd_decode_policy"): {Description: "P/D rules: how a decode is chosen when no session pin did: least_load (default), round_robin or power_of_two.",
			Enum: enum("", "least_load", "round_robin", "power_of_two")},
		ep("kv_connector"):     {Description: "P/D: the engine's KV connector (NixlConnector, MooncakeConnector, …); a pair must match when both declare it."},
		ep("kv_block_size"):    {Description: "P/D: the engine's KV block size in tokens; a pair must match when both declare it.", Min: ptrFloat(0), Max: ptrFloat(4096)},
		ep("kv_cache_dtype"):   {Description: "P/D: the engine's KV cache dtype (auto, fp8, …); a pair must match when both declare it."},
		ep("pairing_protocol"): {Description: "P/D: an explicit transfer protocol name; a pair must match when both declare it."},
		ep("admission_window"): {Description: "This endpoint's admission window, overriding the rule's (0 = the rule's); the engine's max_num_seqs / max_running_requests is the natural value.", Min: ptrFloat(0), Max: ptrFloat(65536)},
		ep("bootstrap_port"): {Description: "SGLang prefill: this engine's bootstrap server port (0 = the rule's pdBootstrapPort); " +
			"vLLM MooncakeConnector prefill: its VLLM_MOONCAKE_BOOTSTRAP_PORT (0 = 8998).", Min: ptrFloat(0), Max: ptrFloat(65535)},
		ep("labels"): {Description: "Free-form labels (at most 16; keys of 1..63 letters, digits, . _ - /; values up to 256 bytes), stored and shown."},
		sa("max_model_len"): {Description: "infergate extension: the engines' context window in tokens (vLLM's --max-model-len; 0 = unknown). " +
			"P/D rules whose KV-exact tier tokenised the prompt answer 400 context_length_exceeded, before any leg, to a prompt that does not fit the chosen pair's window.",
			Min: ptrFloat(0), Max: ptrFloat(16777216)},
		ep("max_model_len"): {Description: "This endpoint's context window in tokens, overriding the rule's max_model_len (0 = the rule's).", Min: ptrFloat(0), Max: ptrFloat(16777216)},
		ep("health"): {Description: "Output only: infergate's finer endpoint state.",
			Enum: enum("probing", "active", "down", "draining", "breaker-open"), ReadOnly: true},

		defRuleStatus + ".ready":  {Description: "Whether the datapath can serve the rule now.", ReadOnly: true},
		defRuleStatus + ".reason": {Description: "Why the rule is not ready.", ReadOnly: true},

		// TLS (docs/tls.md).
		sa("tls_versions"):            {Description: `security 1/2: TLS versions served; default ["TLSv1.2","TLSv1.3"]. SSLv3, TLSv1, TLSv1.1 are refused.`},
		sa("tls_ciphers"):             {Description: "security 1/2: TLS 1.2 cipher suites, OpenSSL or IANA names separated by ':' (TLS 1.3 suites are not configurable)."},
		sa("alpn_protocols"):          {Description: `security 1/2: ALPN protocols offered to clients; default ["h2","http/1.1"].`},
		sa("hsts_max_age"):            {Description: "security 1/2: Strict-Transport-Security max-age in seconds (0 = no header).", Min: ptrFloat(0), Max: ptrFloat(63072000)},
		sa("hsts_include_subdomains"): {Description: "Adds includeSubDomains to the HSTS header (needs hsts_max_age)."},
		sa("hsts_preload"):            {Description: "Adds preload to the HSTS header (needs hsts_max_age)."},
		sa("mtls_frontend"):           {Description: "security 1/2: client-certificate authentication (client_cert_mode disabled/optional/required, client_ca_path or client_ca_cert_data, require_client_cn + client_cn_pattern, client_crl_path)."},
		sa("mtls_backend"):            {Description: "security 2: TLS to engines (verify_server_cert default true, backend_ca_path, client certificate by path or inline data; client_key_data is redacted on GET)."},

		// Engine self-registration (docs/replicas.md).
		defEntry + ".endpointSelector": {Description: "infergate extension (etcd store only): take the endpoints from engine registrations " +
			"(infergate register) instead of the endpoints list, which must then be empty. Registrations the rule cannot use are " +
			"refused and listed in the rule's /status (refused_registrations)."},
		defEndpointSelector + ".prefix": {Description: "etcd prefix the engines register under (<prefix>/engines/); default the store's prefix."},
		defEndpointSelector + ".model":  {Description: "Model the registration must serve.", Required: true},
		defEndpointSelector + ".engine": {Description: "Engine of the registrations (vllm, sglang, trtllm); must equal the rule's kvEngineType.",
			Enum: enum("", "vllm", "sglang", "trtllm")},
	}
}
