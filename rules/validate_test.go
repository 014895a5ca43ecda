package rules

import (
	"testing"
)

func TestValidateRejects(t *testing.T) {
	const (
		bad   = 400
		field = "invalid_field"
		combo = "invalid_combination"
		unsup = "unsupported"
	)
	tests := []struct {
		name   string
		base   func() Rule
		mutate func(*Rule)
		status int
		code   string
		field  string
		result string
	}{
		// Row 0: swagger-style range checks (go-openapi wording).
		{"row0 kvExactMode max", pdRule, func(r *Rule) { r.ServiceArguments.KVExactMode = 4 }, bad, field,
			"serviceArguments.kvExactMode", "serviceArguments.kvExactMode in body should be less than or equal to 3"},
		{"row0 pd_cache_threshold max", pdRule, func(r *Rule) { r.ServiceArguments.PDCacheThreshold = 101 }, bad, field,
			"serviceArguments.pd_cache_threshold", "serviceArguments.pd_cache_threshold in body should be less than or equal to 100"},
		{"row0 pd_balance_abs_threshold max", pdRule, func(r *Rule) { r.ServiceArguments.PDBalanceAbsThreshold = 256 }, bad, field,
			"serviceArguments.pd_balance_abs_threshold", "serviceArguments.pd_balance_abs_threshold in body should be less than or equal to 255"},
		{"row0 negative pd_session_ttl", pdRule, func(r *Rule) { r.ServiceArguments.PDSessionTTLSec = -1 }, bad, field,
			"serviceArguments.pd_session_ttl_sec", "serviceArguments.pd_session_ttl_sec in body should be greater than or equal to 0"},
		{"row0 port zero", plainRule, func(r *Rule) { r.ServiceArguments.Port = 0 }, bad, field,
			"serviceArguments.port", "serviceArguments.port in body should be greater than or equal to 1"},
		{"row0 port too big", plainRule, func(r *Rule) { r.ServiceArguments.Port = 65536 }, bad, field,
			"serviceArguments.port", "serviceArguments.port in body should be less than or equal to 65535"},
		{"row0 targetPort too big", plainRule, func(r *Rule) { r.Endpoints[1].TargetPort = 70000 }, bad, field,
			"endpoints[1].targetPort", "endpoints[1].targetPort in body should be less than or equal to 65535"},
		{"row0 weight 256 not truncated", plainRule, func(r *Rule) { r.Endpoints[0].Weight = 256 }, bad, field,
			"endpoints[0].weight", "endpoints[0].weight in body should be less than or equal to 255"},
		{"row0 weight negative", plainRule, func(r *Rule) { r.Endpoints[0].Weight = -1 }, bad, field,
			"endpoints[0].weight", "endpoints[0].weight in body should be greater than or equal to 0"},
		{"row0 ep_role 3", pdRule, func(r *Rule) { r.Endpoints[0].EPRole = 3 }, bad, field,
			"endpoints[0].ep_role", "endpoints[0].ep_role in body should be less than or equal to 2"},
		{"row0 nixl_port too big", pdRule, func(r *Rule) { r.Endpoints[0].NixlPort = 65536 }, bad, field,
			"endpoints[0].nixl_port", "endpoints[0].nixl_port in body should be less than or equal to 65535"},
		{"row0 kvZmqPort too big", pdRule, func(r *Rule) { r.ServiceArguments.KVZmqPort = 70000 }, bad, field,
			"serviceArguments.kvZmqPort", "serviceArguments.kvZmqPort in body should be less than or equal to 65535"},
		{"row0 kvBlockSize negative", pdRule, func(r *Rule) { r.ServiceArguments.KVBlockSize = -16 }, bad, field,
			"serviceArguments.kvBlockSize", "serviceArguments.kvBlockSize in body should be greater than or equal to 0"},
		{"row0 pdBootstrapPort too big", pdRule, func(r *Rule) { r.ServiceArguments.PDBootstrapPort = 65536 }, bad, field,
			"serviceArguments.pdBootstrapPort", "serviceArguments.pdBootstrapPort in body should be less than or equal to 65535"},
		{"row0 chwbl level range", plainRule, func(r *Rule) { r.ServiceArguments.Sel = 8; r.ServiceArguments.CHWBLPrefixHashLevel = intp(4) }, bad, field,
			"serviceArguments.chwbl_prefix_hash_level", "serviceArguments.chwbl_prefix_hash_level in body should be less than or equal to 3"},
		{"row0 chwbl load factor range", plainRule, func(r *Rule) { r.ServiceArguments.Sel = 10; r.ServiceArguments.CHWBLMeanLoadFactor = 99 }, bad, field,
			"serviceArguments.chwbl_mean_load_factor", "serviceArguments.chwbl_mean_load_factor in body should be greater than or equal to 100"},
		{"row0 chwbl replication range", plainRule, func(r *Rule) { r.ServiceArguments.Sel = 8; r.ServiceArguments.CHWBLReplication = 1025 }, bad, field,
			"serviceArguments.chwbl_replication", "serviceArguments.chwbl_replication in body should be less than or equal to 1024"},
		{"row0 probeport range", plainRule, func(r *Rule) { r.ServiceArguments.ProbeType = "http"; r.ServiceArguments.ProbePort = 65536 }, bad, field,
			"serviceArguments.probeport", "malformed-service-pport error"},
		// Rows 1–28: LoxiLB's checks with LoxiLB's exact text.
		{"row1 VIP not an IP", plainRule, func(r *Rule) { r.ServiceArguments.ExternalIP = "llm.local" }, bad, field,
			"serviceArguments.externalIP", "malformed-service error"},
		{"row1 VIP missing", plainRule, func(r *Rule) { r.ServiceArguments.ExternalIP = "" }, bad, field,
			"serviceArguments.externalIP", "malformed-service error"},
		{"row2 bad privateIP", plainRule, func(r *Rule) { r.ServiceArguments.PrivateIP = "x" }, bad, field,
			"serviceArguments.privateIP", "malformed-service privateIP error"},
		{"row3 inactiveTimeOut > 86400", plainRule, func(r *Rule) { r.ServiceArguments.InactiveTimeOut = 86401 }, bad, field,
			"serviceArguments.inactiveTimeOut", "service-args error"},
		{"row3 inactiveTimeOut negative", plainRule, func(r *Rule) { r.ServiceArguments.InactiveTimeOut = -1 }, bad, field,
			"serviceArguments.inactiveTimeOut", "service-args error"},
		{"row4 bad probetype", plainRule, func(r *Rule) { r.ServiceArguments.ProbeType = "grpc" }, bad, field,
			"serviceArguments.probetype", "malformed-service-ptype error"},
		{"row4 probeport without probe", plainRule, func(r *Rule) { r.ServiceArguments.ProbeType = "none"; r.ServiceArguments.ProbePort = 80 }, bad, combo,
			"serviceArguments.probeport", "malformed-service-pport error"},
		{"row5 no endpoints", plainRule, func(r *Rule) { r.Endpoints = nil }, bad, field,
			"endpoints", "endpoints-range error"},
		{"row5 33 endpoints", func() Rule { return pdRuleN(33) }, func(*Rule) {}, bad, field,
			"endpoints", "endpoints-range error"},
		{"row6 icmp with port", plainRule, func(r *Rule) { r.ServiceArguments.Protocol = "icmp" }, bad, combo,
			"serviceArguments.port", "malformed-service error"},
		{"row7 ppv2 on udp", plainRule, func(r *Rule) { r.ServiceArguments.Protocol = "udp"; r.ServiceArguments.ProxyProtocolV2 = true }, bad, combo,
			"serviceArguments.proxyprotocolv2", "proxy-proto-v2 not tcp service error"},
		{"row8 unknown protocol", plainRule, func(r *Rule) { r.ServiceArguments.Protocol = "quic" }, bad, field,
			"serviceArguments.protocol", "malformed-proto error"},
		{"row8 missing protocol", plainRule, func(r *Rule) { r.ServiceArguments.Protocol = "" }, bad, field,
			"serviceArguments.protocol", "malformed-proto error"},
		{"row9 secondaryIPs on tcp", plainRule, func(r *Rule) { r.SecondaryIPs = []SecondaryIP{{"10.9.9.9"}} }, bad, combo,
			"secondaryIPs", "secondaryIP-args error"},
		{"row9 too many secondaryIPs", plainRule, func(r *Rule) {
			r.ServiceArguments.Protocol = "sctp"
			r.SecondaryIPs = []SecondaryIP{{"10.9.9.1"}, {"10.9.9.2"}, {"10.9.9.3"}, {"10.9.9.4"}}
		}, bad, field, "secondaryIPs", "secondaryIP-args len error"},
		{"row9 bad secondaryIP", plainRule, func(r *Rule) { r.ServiceArguments.Protocol = "sctp"; r.SecondaryIPs = []SecondaryIP{{"nope"}} }, bad, field,
			"secondaryIPs[0].secondaryIP", "malformed-secIP error"},
		{"row10 n3 on tcp", plainRule, func(r *Rule) { r.ServiceArguments.Sel = 6 }, bad, combo,
			"serviceArguments.sel", "non-udp-n3-args error"},
		{"row11 portMax below port", plainRule, func(r *Rule) { r.ServiceArguments.PortMax = 10 }, bad, combo,
			"serviceArguments.portMax", "serv-port-args range error"},
		{"row12 hostonearm with VIP", plainRule, func(r *Rule) { r.ServiceArguments.Mode = 5 }, bad, combo,
			"serviceArguments.externalIP", "hostarm-args error"},
		{"row13 endpoint IP", plainRule, func(r *Rule) { r.Endpoints[1].EndpointIP = "backend-2" }, bad, field,
			"endpoints[1].endpointIP", "malformed-lbep error"},
		{"row13 endpoint IP with zone", plainRule, func(r *Rule) { r.Endpoints[1].EndpointIP = "fe80::1%eth0" }, bad, field,
			"endpoints[1].endpointIP", "malformed-lbep error"},
		{"row13 nat46", plainRule, func(r *Rule) { r.Endpoints[1].EndpointIP = "2001:db8::2" }, bad, combo,
			"endpoints[1].endpointIP", "malformed-service nat46 error"},
		{"row13 dsr port", plainRule, func(r *Rule) { r.ServiceArguments.Mode = 3; r.ServiceArguments.Sel = 1 }, bad, combo,
			"endpoints[0].targetPort", "malformed-service dsr-port error"},
		{"row14 chwbl without fullproxy", plainRule, func(r *Rule) { r.ServiceArguments.Sel = 8; r.ServiceArguments.Mode = 2 }, bad, combo,
			"serviceArguments.sel", "sel=chwbl(8) requires mode=fullproxy (no L4 datapath selector)"},
		{"row14 n2 without fullproxy", plainRule, func(r *Rule) { r.ServiceArguments.Sel = 5; r.ServiceArguments.Mode = 0 }, bad, combo,
			"serviceArguments.sel", "sel=n2(5) requires mode=fullproxy (no L4 datapath selector)"},
		{"row15 pd without fullproxy", pdRule, func(r *Rule) { r.ServiceArguments.Mode = 2 }, bad, combo,
			"serviceArguments.pd_disagg_mode", "pd-disagg requires mode=fullproxy"},
		{"row16 pd without decode", pdRule, func(r *Rule) { r.Endpoints[1].EPRole = 1 }, bad, combo,
			"endpoints", "pd-disagg requires at least 1 prefill (ep_role=1) and 1 decode (ep_role=2) endpoint"},
		{"pd prefills all weight 0", pdRule, func(r *Rule) { r.Endpoints[0].Weight = 0 }, bad, combo,
			"endpoints[0].weight", "pd-disagg requires at least 1 prefill (ep_role=1) endpoint with weight > 0"},
		{"pd decodes all weight 0", pdRule, func(r *Rule) { r.Endpoints[1].Weight = 0 }, bad, combo,
			"endpoints[1].weight", "pd-disagg requires at least 1 decode (ep_role=2) endpoint with weight > 0"},
		{"row17 cache-aware without pd", plainRule, func(r *Rule) { r.ServiceArguments.PDCacheAwareMode = true }, bad, combo,
			"serviceArguments.pd_cache_aware_mode", "pd-cache-aware requires pd_disagg_mode=true"},
		{"row18 kv3 with pd", pdRule, func(r *Rule) { r.ServiceArguments.KVExactMode = 3 }, bad, combo,
			"serviceArguments.kvExactMode", "kv-exact single-role mode is incompatible with pd-disagg (use kvExactMode=1 for P/D)"},
		{"row19 kv3 without fullproxy", plainRule, func(r *Rule) { r.ServiceArguments.KVExactMode = 3; r.ServiceArguments.Mode = 1 }, bad, combo,
			"serviceArguments.kvExactMode", "kv-exact single-role mode requires mode=fullproxy"},
		{"row20 kv1 without pd", plainRule, func(r *Rule) { r.ServiceArguments.KVExactMode = 1 }, bad, combo,
			"serviceArguments.kvExactMode", "kv-exact zmq mode requires pd_disagg_mode=true (use kvExactMode=3 for a single pool)"},
		{"row21 unknown engine", plainRule, func(r *Rule) { r.ServiceArguments.KVEngineType = "tgi" }, bad, field,
			"serviceArguments.kvEngineType", `kv-engine-type must be one of "vllm", "sglang", "trtllm", "llamacpp"`},
		{"row21 engine is case-sensitive", plainRule, func(r *Rule) { r.ServiceArguments.KVEngineType = "VLLM" }, bad, field,
			"serviceArguments.kvEngineType", `kv-engine-type must be one of "vllm", "sglang", "trtllm", "llamacpp"`},
		{"row22 dp ranks > 8", pdRule, func(r *Rule) { r.ServiceArguments.KVDpRankCount = 9 }, bad, field,
			"serviceArguments.kvDpRankCount", "kv-dp-rank-count must be within 1..8 (0 = default 1)"},
		{"row22 dp ranks negative", pdRule, func(r *Rule) { r.ServiceArguments.KVDpRankCount = -1 }, bad, field,
			"serviceArguments.kvDpRankCount", "kv-dp-rank-count must be within 1..8 (0 = default 1)"},
		{"row23 unknown hash algo", pdRule, func(r *Rule) { r.ServiceArguments.KVHashAlgo = "md5" }, bad, field,
			"serviceArguments.kvHashAlgo", `kv-hash-algo must be one of "sha256_cbor", "xxhash_cbor", "sha256_sglang", "blockhash_trtllm"`},
		{"row24 vllm with sglang algo", pdRule, func(r *Rule) { r.ServiceArguments.KVHashAlgo = "sha256_sglang" }, bad, combo,
			"serviceArguments.kvHashAlgo", `kv-hash-algo "sha256_sglang" is incompatible with kv-engine-type "vllm" (omit kvHashAlgo to take the engine default "sha256_cbor")`},
		{"row24 sglang with cbor algo", pdRule, func(r *Rule) {
			r.ServiceArguments.KVEngineType = "sglang"
			r.ServiceArguments.KVHashAlgo = "xxhash_cbor"
			r.Endpoints[0].NixlPort = 0
		}, bad, combo, "serviceArguments.kvHashAlgo",
			`kv-hash-algo "xxhash_cbor" is incompatible with kv-engine-type "sglang" (omit kvHashAlgo to take the engine default "sha256_sglang")`},
		{"row24 trtllm with cbor algo", pdRule, func(r *Rule) {
			r.ServiceArguments.KVEngineType = "trtllm"
			r.ServiceArguments.KVHashAlgo = "sha256_cbor"
			r.Endpoints[0].NixlPort = 0
		}, bad, combo, "serviceArguments.kvHashAlgo",
			`kv-hash-algo "sha256_cbor" is incompatible with kv-engine-type "trtllm" (omit kvHashAlgo to take the engine default "blockhash_trtllm")`},
		{"row25 bootstrap port on vllm", pdRule, func(r *Rule) { r.ServiceArguments.PDBootstrapPort = 8998 }, bad, combo,
			"serviceArguments.pdBootstrapPort", "pd-bootstrap-port requires pd_disagg_mode=true and kv-engine-type sglang"},
		{"row25 bootstrap port on sglang without pd", plainRule, func(r *Rule) {
			r.ServiceArguments.KVEngineType = "sglang"
			r.ServiceArguments.PDBootstrapPort = 8998
		}, bad, combo, "serviceArguments.pdBootstrapPort", "pd-bootstrap-port requires pd_disagg_mode=true and kv-engine-type sglang"},
		{"row26 trtllm kv mode 2", pdRule, func(r *Rule) {
			r.ServiceArguments.KVEngineType = "trtllm"
			r.ServiceArguments.KVExactMode = 2
			r.Endpoints[0].NixlPort = 0
		}, bad, combo, "serviceArguments.kvExactMode", "kv-engine-type trtllm supports kvExactMode 1 or 3 (HTTP-polled event plane)"},
		{"row27 trtllm zmq port", pdRule, func(r *Rule) {
			r.ServiceArguments.KVEngineType = "trtllm"
			r.ServiceArguments.KVZmqPort = 6000
			r.Endpoints[0].NixlPort = 0
		}, bad, combo, "serviceArguments.kvZmqPort", "kvZmqPort is meaningless for kv-engine-type trtllm (events ride the endpoint's serving port)"},
		{"row28 trtllm dp ranks", pdRule, func(r *Rule) {
			r.ServiceArguments.KVEngineType = "trtllm"
			r.ServiceArguments.KVDpRankCount = 2
			r.Endpoints[0].NixlPort = 0
		}, bad, combo, "serviceArguments.kvDpRankCount", "kvDpRankCount is meaningless for kv-engine-type trtllm (no client-visible DP ranks)"},
		{"row34 dsr needs hash", plainRule, func(r *Rule) {
			r.ServiceArguments.Mode = 3
			r.Endpoints[0].TargetPort, r.Endpoints[1].TargetPort = 2020, 2020
		}, bad, combo, "serviceArguments.sel", "Error: Only Hash Selection criteria allowed for DSR mode"},
		// infergate restrictions.
		{"mode 0 not served", plainRule, func(r *Rule) { r.ServiceArguments.Mode = 0 }, bad, unsup,
			"serviceArguments.mode", "mode 0 is not served: infergate is an L7 proxy and serves only mode 4 (fullproxy)"},
		{"mode 6 out of range", plainRule, func(r *Rule) { r.ServiceArguments.Mode = 6 }, bad, field,
			"serviceArguments.mode", "serviceArguments.mode in body should be less than or equal to 5"},
		{"udp not served", plainRule, func(r *Rule) { r.ServiceArguments.Protocol = "udp" }, bad, unsup,
			"serviceArguments.protocol", ""},
		{"sctp not served", plainRule, func(r *Rule) { r.ServiceArguments.Protocol = "sctp"; r.SecondaryIPs = []SecondaryIP{{"10.9.9.1"}} }, bad, unsup,
			"serviceArguments.protocol", ""},
		{"security 3", plainRule, func(r *Rule) { r.ServiceArguments.Security = 3 }, bad, field, "serviceArguments.security", ""},
		{"privateIP", plainRule, func(r *Rule) { r.ServiceArguments.PrivateIP = "192.168.0.1" }, bad, unsup, "serviceArguments.privateIP", ""},
		{"oper", plainRule, func(r *Rule) { r.ServiceArguments.Oper = 1 }, bad, unsup, "serviceArguments.oper", ""},
		{"bgp", plainRule, func(r *Rule) { r.ServiceArguments.BGP = true }, bad, unsup, "serviceArguments.bgp", ""},
		{"snat", plainRule, func(r *Rule) { r.ServiceArguments.SNAT = true }, bad, unsup, "serviceArguments.snat", ""},
		{"egress", plainRule, func(r *Rule) { r.ServiceArguments.Egress = true }, bad, unsup, "serviceArguments.egress", ""},
		{"proxyprotocolv2", plainRule, func(r *Rule) { r.ServiceArguments.ProxyProtocolV2 = true }, bad, unsup, "serviceArguments.proxyprotocolv2", ""},
		{"allowedSources", plainRule, func(r *Rule) { r.AllowedSources = []AllowedSource{{"10.0.0.0/8"}} }, bad, unsup, "allowedSources", ""},
		{"allowedSources bad cidr", plainRule, func(r *Rule) { r.AllowedSources = []AllowedSource{{"10.0.0.0"}} }, bad, field, "allowedSources[0].prefix", ""},
		{"port range", plainRule, func(r *Rule) { r.ServiceArguments.PortMax = 2030 }, bad, unsup, "serviceArguments.portMax", ""},
		{"sel 8 on P/D", pdRule, func(r *Rule) { r.ServiceArguments.Sel = 8 }, bad, combo,
			"serviceArguments.sel", "sel 8 (chwbl) is for single-pool rules; P/D rules pick endpoints with the P/D ladder (use pd_cache_aware_mode for prefix affinity)"},
		{"sel 10 on P/D", pdRule, func(r *Rule) { r.ServiceArguments.Sel = 10 }, bad, combo,
			"serviceArguments.sel", "sel 10 (wrr-hash) is for single-pool rules; P/D rules pick endpoints with the P/D ladder (use pd_cache_aware_mode for prefix affinity)"},
		{"chwbl hash level 0", plainRule, func(r *Rule) { r.ServiceArguments.Sel = 8; v := 0; r.ServiceArguments.CHWBLPrefixHashLevel = &v }, bad, field,
			"serviceArguments.chwbl_prefix_hash_level", ""},
		{"chwbl hash level 4", plainRule, func(r *Rule) { r.ServiceArguments.Sel = 8; v := 4; r.ServiceArguments.CHWBLPrefixHashLevel = &v }, bad, field,
			"serviceArguments.chwbl_prefix_hash_level", ""},
		{"chwbl flags 256", plainRule, func(r *Rule) { r.ServiceArguments.Sel = 8; v := 256; r.ServiceArguments.CHWBLPrefixHashFlags = &v }, bad, field,
			"serviceArguments.chwbl_prefix_hash_flags", ""},
		{"chwbl flags negative", plainRule, func(r *Rule) { r.ServiceArguments.Sel = 10; v := -1; r.ServiceArguments.CHWBLPrefixHashFlags = &v }, bad, field,
			"serviceArguments.chwbl_prefix_hash_flags", ""},
		{"chwbl load factor 99", plainRule, func(r *Rule) { r.ServiceArguments.Sel = 8; r.ServiceArguments.CHWBLMeanLoadFactor = 99 }, bad, field,
			"serviceArguments.chwbl_mean_load_factor", ""},
		{"chwbl load factor 301", plainRule, func(r *Rule) { r.ServiceArguments.Sel = 8; r.ServiceArguments.CHWBLMeanLoadFactor = 301 }, bad, field,
			"serviceArguments.chwbl_mean_load_factor", ""},
		{"chwbl replication 1025", plainRule, func(r *Rule) { r.ServiceArguments.Sel = 10; r.ServiceArguments.CHWBLReplication = 1025 }, bad, field,
			"serviceArguments.chwbl_replication", ""},
		{"sel 9 not served", plainRule, func(r *Rule) { r.ServiceArguments.Sel = 9 }, bad, unsup, "serviceArguments.sel", ""},
		{"sel 11 out of range", plainRule, func(r *Rule) { r.ServiceArguments.Sel = 11 }, bad, field, "serviceArguments.sel", ""},
		{"chwbl knob on sel 0", plainRule, func(r *Rule) { r.ServiceArguments.CHWBLReplication = 100 }, bad, combo,
			"serviceArguments.chwbl_replication", "chwbl_replication only applies to sel 8/10 (chwbl); this rule uses sel 0"},
		{"chwbl salt on sel 2", plainRule, func(r *Rule) { r.ServiceArguments.Sel = 2; f := false; r.ServiceArguments.CHWBLEnableCacheSalt = &f }, bad, combo,
			"serviceArguments.chwbl_enable_cache_salt", ""},
		{"kv mode 2 not supported", pdRule, func(r *Rule) { r.ServiceArguments.KVExactMode = 2 }, bad, unsup, "serviceArguments.kvExactMode", ""},
		{"llamacpp pd", pdRule, func(r *Rule) {
			r.ServiceArguments.KVEngineType = "llamacpp"
			r.ServiceArguments.KVExactMode = 0
			r.Endpoints[0].NixlPort = 0
		}, bad, unsup, "serviceArguments.pd_disagg_mode", "pd_disagg_mode is unsupported for kv-engine-type llamacpp"},
		{"llamacpp kv exact", plainRule, func(r *Rule) { r.ServiceArguments.KVEngineType = "llamacpp"; r.ServiceArguments.KVExactMode = 3 }, bad, unsup,
			"serviceArguments.kvExactMode", "kvExactMode is unsupported for kv-engine-type llamacpp"},
		{"llamacpp zmq", plainRule, func(r *Rule) { r.ServiceArguments.KVEngineType = "llamacpp"; r.ServiceArguments.KVZmqPort = 6000 }, bad, combo,
			"serviceArguments.kvZmqPort", "kvZmqPort is not used by llamacpp; omit it"},
		{"llamacpp dp", plainRule, func(r *Rule) { r.ServiceArguments.KVEngineType = "llamacpp"; r.ServiceArguments.KVDpRankCount = 2 }, bad, combo,
			"serviceArguments.kvDpRankCount", "kvDpRankCount is not used by llamacpp; omit it"},
		{"llamacpp block size", plainRule, func(r *Rule) { r.ServiceArguments.KVEngineType = "llamacpp"; r.ServiceArguments.KVBlockSize = 32 }, bad, combo,
			"serviceArguments.kvBlockSize", "kvBlockSize is not used by llamacpp; omit it"},
		{"llamacpp hash algo", plainRule, func(r *Rule) {
			r.ServiceArguments.KVEngineType = "llamacpp"
			r.ServiceArguments.KVHashAlgo = "sha256_cbor"
		}, bad, unsup,
			"serviceArguments.kvHashAlgo", ""},
		{"zmq span overflows", pdRule, func(r *Rule) { r.ServiceArguments.KVZmqPort = 65535; r.ServiceArguments.KVDpRankCount = 2 }, bad, combo,
			"serviceArguments.kvZmqPort", "kvZmqPort + kvDpRankCount - 1 must be <= 65535"},
		{"duplicate endpoint via v4-mapped", plainRule, func(r *Rule) { r.Endpoints[1].EndpointIP = "::ffff:10.1.0.1" }, bad, field, "endpoints[1].endpointIP", ""},
		{"duplicate endpoint", plainRule, func(r *Rule) { r.Endpoints[1].EndpointIP = "10.1.0.1" }, bad, field, "endpoints[1].endpointIP", ""},
		{"duplicate IPv6 endpoint bracketed", plainRule, func(r *Rule) {
			r.ServiceArguments.ExternalIP = "[2001:db8::10]"
			r.Endpoints[0].EndpointIP, r.Endpoints[1].EndpointIP = "2001:db8::1", "[2001:db8::1]"
		}, bad, field, "endpoints[1].endpointIP", ""},
		{"nixl_port on sglang", pdRule, func(r *Rule) { r.ServiceArguments.KVEngineType = "sglang" }, bad, combo, "endpoints[0].nixl_port", ""},
		{"nixl_port on trtllm", pdRule, func(r *Rule) { r.ServiceArguments.KVEngineType = "trtllm" }, bad, combo, "endpoints[0].nixl_port", ""},
		{"session basic-auth", plainRule, func(r *Rule) { r.ServiceArguments.Sel = 3; r.ServiceArguments.SessionHeaderName = "basic-auth" }, bad, unsup,
			"serviceArguments.session_header_name", ""},
		{"session bad header", plainRule, func(r *Rule) { r.ServiceArguments.Sel = 3; r.ServiceArguments.SessionHeaderName = "X User" }, bad, field,
			"serviceArguments.session_header_name", ""},
		{"session empty cookie", plainRule, func(r *Rule) { r.ServiceArguments.Sel = 3; r.ServiceArguments.SessionHeaderName = "cookie:" }, bad, field,
			"serviceArguments.session_header_name", ""},
		{"session on sel 2", plainRule, func(r *Rule) { r.ServiceArguments.Sel = 2; r.ServiceArguments.SessionHeaderName = "X-User" }, bad, combo,
			"serviceArguments.session_header_name", ""},
		{"probetype udp", plainRule, func(r *Rule) { r.ServiceArguments.ProbeType = "udp" }, bad, unsup, "serviceArguments.probetype", ""},
		{"probetype ping", plainRule, func(r *Rule) { r.ServiceArguments.ProbeType = "ping" }, bad, unsup, "serviceArguments.probetype", ""},
		{"path_match_mode regex", plainRule, func(r *Rule) { r.ServiceArguments.PathMatchMode = "regex" }, bad, field,
			"serviceArguments.path_match_mode", "serviceArguments.path_match_mode in body should be one of [disabled prefix exact]"},
		{"path_match_mode without prefix", plainRule, func(r *Rule) { r.ServiceArguments.PathMatchMode = "prefix" }, bad, combo,
			"serviceArguments.path_prefix", ""},
		{"path_prefix relative", plainRule, func(r *Rule) { r.ServiceArguments.PathPrefix = "v1" }, bad, field, "serviceArguments.path_prefix", ""},
		{"backend http2", plainRule, func(r *Rule) { r.ServiceArguments.BackendProtocol = "http2" }, bad, unsup, "serviceArguments.backend_protocol", ""},
		{"backend h3", plainRule, func(r *Rule) { r.ServiceArguments.BackendProtocol = "h3" }, bad, field, "serviceArguments.backend_protocol", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.base()
			tc.mutate(&r)
			err := Validate(r)
			ae := wantAPIError(t, err, tc.status, tc.code, tc.field, tc.result)
			if ae.Message == "" {
				t.Errorf("empty Message")
			}
			if _, cerr := Compile(r); cerr == nil {
				t.Errorf("Compile accepted a rule Validate rejected")
			}
		})
	}
}

func TestValidateAccepts(t *testing.T) {
	tests := []struct {
		name   string
		base   func() Rule
		mutate func(*Rule)
	}{
		{"plain", plainRule, func(*Rule) {}},
		{"vllm pd kv1", pdRule, func(*Rule) {}},
		{"vllm pd explicit algo", pdRule, func(r *Rule) { r.ServiceArguments.KVHashAlgo = "xxhash_cbor" }},
		{"vllm kv mode 3 single pool", plainRule, func(r *Rule) { r.ServiceArguments.KVExactMode = 3 }},
		{"sglang pd bootstrap", pdRule, func(r *Rule) {
			r.ServiceArguments.KVEngineType = "sglang"
			r.ServiceArguments.PDBootstrapPort = 8998
			r.ServiceArguments.KVDpRankCount = 8
			r.Endpoints[0].NixlPort = 0
		}},
		{"trtllm pd kv1 default zmq", pdRule, func(r *Rule) {
			r.ServiceArguments.KVEngineType = "trtllm"
			r.ServiceArguments.KVZmqPort = 5557
			r.ServiceArguments.KVDpRankCount = 1
			r.Endpoints[0].NixlPort = 0
		}},
		{"llamacpp plain", plainRule, func(r *Rule) { r.ServiceArguments.KVEngineType = "llamacpp"; r.ServiceArguments.KVBlockSize = 16 }},
		{"32 endpoints", func() Rule { return pdRuleN(32) }, func(*Rule) {}},
		{"ipv6 bracketed", plainRule, func(r *Rule) {
			r.ServiceArguments.ExternalIP = "[2001:db8::10]"
			r.Endpoints[0].EndpointIP, r.Endpoints[1].EndpointIP = "[2001:db8::1]", "10.1.0.2"
		}},
		{"session cookie sel 3", plainRule, func(r *Rule) { r.ServiceArguments.Sel = 3; r.ServiceArguments.SessionHeaderName = "cookie:sid" }},
		{"session query sel 0", plainRule, func(r *Rule) { r.ServiceArguments.SessionHeaderName = "query:user" }},
		{"session header sel 3", plainRule, func(r *Rule) { r.ServiceArguments.Sel = 3; r.ServiceArguments.SessionHeaderName = "X-User" }},
		{"least conn", plainRule, func(r *Rule) { r.ServiceArguments.Sel = 4 }},
		{"path prefix", plainRule, func(r *Rule) {
			r.ServiceArguments.PathPrefix = "/v1"
			r.ServiceArguments.PathMatchMode = "prefix"
			r.ServiceArguments.ModelName = "llama"
		}},
		{"path disabled", plainRule, func(r *Rule) { r.ServiceArguments.PathMatchMode = "disabled" }},
		{"http probe on port 0", plainRule, func(r *Rule) { r.ServiceArguments.ProbeType = "http"; r.ServiceArguments.ProbeReq = "/health" }},
		{"monitor with probeport", plainRule, func(r *Rule) { r.ServiceArguments.Monitor = true; r.ServiceArguments.ProbePort = 8000 }},
		{"accepted knobs", plainRule, func(r *Rule) {
			sa := &r.ServiceArguments
			sa.Managed, sa.ID, sa.ProjectID, sa.TraceType, sa.BackendProtocol = true, "id-1", "p1", "openai", "http1"
			sa.PortMax = sa.Port
			sa.InactiveTimeOut = 86400
		}},
		{"weight 0 drains", plainRule, func(r *Rule) { r.Endpoints[0].Weight = 0; r.Endpoints[1].Weight = 255 }},
		{"zmq span at limit", pdRule, func(r *Rule) { r.ServiceArguments.KVZmqPort = 65528; r.ServiceArguments.KVDpRankCount = 8 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.base()
			tc.mutate(&r)
			if err := Validate(r); err != nil {
				t.Fatalf("Validate: %v", err)
			}
		})
	}
}
