package rules

import "strconv"

// Wire field names (LoxiLB JSON spellings) that this package reads, rewrites
// or names in errors. The unknown-key check derives its key sets from the
// model's struct tags; these constants are what the hand-written checks use,
// and fields_test.go proves each one is a real tag of the model.
const (
	fieldServiceArguments = "serviceArguments"
	fieldEndpoints        = "endpoints"
	fieldSecondaryIPs     = "secondaryIPs"
	fieldAllowedSources   = "allowedSources"
	fieldStatus           = "status" // output only

	fieldExternalIP      = "externalIP"
	fieldPrivateIP       = "privateIP"
	fieldPort            = "port"
	fieldPortMax         = "portMax"
	fieldProtocol        = "protocol"
	fieldSel             = "sel"
	fieldMode            = "mode"
	fieldSecurity        = "security"
	fieldPathPrefix      = "path_prefix"
	fieldPathMatchMode   = "path_match_mode"
	fieldInactiveTimeOut = "inactiveTimeOut"
	fieldProbeType       = "probetype"
	fieldProbePort       = "probeport"
	fieldOper            = "oper"
	fieldBGP             = "bgp"
	fieldSNAT            = "snat"
	fieldEgress          = "egress"
	fieldProxyProtocolV2 = "proxyprotocolv2"
	fieldBackendProtocol = "backend_protocol"
	fieldSessionHeader   = "session_header_name"

	fieldCHWBLPrefixHashLevel = "chwbl_prefix_hash_level"
	fieldCHWBLPrefixHashFlags = "chwbl_prefix_hash_flags"
	fieldCHWBLMeanLoadFactor  = "chwbl_mean_load_factor"
	fieldCHWBLReplication     = "chwbl_replication"
	fieldCHWBLEnableCacheSalt = "chwbl_enable_cache_salt"

	fieldPDDisaggMode     = "pd_disagg_mode"
	fieldPDCacheAwareMode = "pd_cache_aware_mode"
	fieldPDBootstrapPort  = "pdBootstrapPort"

	fieldKVExactMode   = "kvExactMode"
	fieldKVEngineType  = "kvEngineType"
	fieldKVZmqPort     = "kvZmqPort"
	fieldKVBlockSize   = "kvBlockSize"
	fieldKVHashAlgo    = "kvHashAlgo"
	fieldKVDpRankCount = "kvDpRankCount"

	fieldEndpointIP = "endpointIP"
	fieldTargetPort = "targetPort"
	fieldNixlPort   = "nixl_port"
	fieldState      = "state"      // output only
	fieldCounter    = "counter"    // output only
	fieldWindowLoad = "windowLoad" // output only

	fieldSecondaryIP = "secondaryIP"
	fieldPrefix      = "prefix"

	fieldWeight = "weight" // P/D role weights
)

// TLS wire fields.
const (
	fieldTLSVersions           = "tls_versions"
	fieldTLSCiphers            = "tls_ciphers"
	fieldALPNProtocols         = "alpn_protocols"
	fieldHSTSMaxAge            = "hsts_max_age"
	fieldHSTSIncludeSubdomains = "hsts_include_subdomains"
	fieldHSTSPreload           = "hsts_preload"
	fieldMTLSFrontend          = "mtls_frontend"
	fieldMTLSBackend           = "mtls_backend"
	fieldHost                  = "host"

	fieldClientCertMode   = "client_cert_mode"
	fieldClientCAPath     = "client_ca_path"
	fieldClientCACertData = "client_ca_cert_data"
	fieldRequireClientCN  = "require_client_cn"
	fieldClientCNPattern  = "client_cn_pattern"
	fieldClientCRLPath    = "client_crl_path"

	fieldVerifyServerCert = "verify_server_cert"
	fieldBackendCAPath    = "backend_ca_path"
	fieldClientCertPath   = "client_cert_path"
	fieldClientKeyPath    = "client_key_path"
	fieldClientCertData   = "client_cert_data"
	fieldClientKeyData    = "client_key_data"
)

// saPath and epPath build LoxiLB-style field paths for error reports.
func saPath(name string) string { return fieldServiceArguments + "." + name }

func epPath(i int, name string) string {
	return fieldEndpoints + "[" + strconv.Itoa(i) + "]." + name
}

// --- LoxiLB compatibility ---
const (
	fieldSecondaryVIPs = "secondaryVIPs"
	fieldAddress       = "address"
	fieldAdminStateUp  = "adminStateUp"
	fieldAnnotations   = "annotations"
	fieldHTTPMethod    = "httpMethod"
	fieldURLPath       = "urlPath"
	fieldExpectedCodes = "expectedCodes"
	fieldHealth        = "health" // output only
)

// --- HTTP surface ---
const fieldAllowedPaths = "allowed_paths"
