package rules

// The wire model is LoxiLB's LoadbalanceEntry, field for field, with its exact
// (deliberately mixed-case) JSON names so existing LoxiLB rule bodies work
// unchanged. Integers are plain ints so out-of-range values reach validation
// instead of being silently truncated the way LoxiLB's uint8/uint16 fields are.
// omitempty gives LoxiLB's zero-suppression on GET.

// Rule is one load-balancer rule as sent to and returned by the REST API.
type Rule struct {
	ServiceArguments ServiceArguments `json:"serviceArguments" yaml:"serviceArguments"`
	Endpoints        []Endpoint       `json:"endpoints" yaml:"endpoints"`
	SecondaryIPs     []SecondaryIP    `json:"secondaryIPs,omitempty" yaml:"secondaryIPs,omitempty"`
	AllowedSources   []AllowedSource  `json:"allowedSources,omitempty" yaml:"allowedSources,omitempty"`
	// Status is output only: filled on GET from the running datapath.
	Status *RuleStatus `json:"status,omitempty" yaml:"status,omitempty"`

	// --- LoxiLB compatibility ---
	// SecondaryVIPs are further addresses the rule is served on (Octavia
	// additional_vips); subnetId/portId/proto are stored verbatim.
	SecondaryVIPs []SecondaryVIP `json:"secondaryVIPs,omitempty" yaml:"secondaryVIPs,omitempty"`

	// --- engine self-registration (an infergate extension; LoxiLB has none) ---
	// EndpointSelector takes the rule's endpoints from engine
	// registrations instead of the endpoints list (see selector.go).
	EndpointSelector *EndpointSelector `json:"endpointSelector,omitempty" yaml:"endpointSelector,omitempty"`
}

// ServiceArguments is the virtual service and every per-rule knob.
type ServiceArguments struct {
	ExternalIP      string `json:"externalIP" yaml:"externalIP"`
	PrivateIP       string `json:"privateIP,omitempty" yaml:"privateIP,omitempty"`
	Port            int    `json:"port" yaml:"port"`
	PortMax         int    `json:"portMax,omitempty" yaml:"portMax,omitempty"`
	Protocol        string `json:"protocol" yaml:"protocol"`
	Sel             int    `json:"sel" yaml:"sel"`
	Mode            int    `json:"mode" yaml:"mode"`
	Security        int    `json:"security,omitempty" yaml:"security,omitempty"`
	Name            string `json:"name,omitempty" yaml:"name,omitempty"`
	Block           uint32 `json:"block,omitempty" yaml:"block,omitempty"`
	Host            string `json:"host,omitempty" yaml:"host,omitempty"`
	PathPrefix      string `json:"path_prefix,omitempty" yaml:"path_prefix,omitempty"`
	PathMatchMode   string `json:"path_match_mode,omitempty" yaml:"path_match_mode,omitempty"`
	ModelName       string `json:"model_name,omitempty" yaml:"model_name,omitempty"`
	InactiveTimeOut int    `json:"inactiveTimeOut,omitempty" yaml:"inactiveTimeOut,omitempty"`

	Monitor      bool   `json:"monitor,omitempty" yaml:"monitor,omitempty"`
	ProbeType    string `json:"probetype,omitempty" yaml:"probetype,omitempty"`
	ProbePort    int    `json:"probeport,omitempty" yaml:"probeport,omitempty"`
	ProbeReq     string `json:"probereq,omitempty" yaml:"probereq,omitempty"`
	ProbeResp    string `json:"proberesp,omitempty" yaml:"proberesp,omitempty"`
	ProbeTimeout int    `json:"probeTimeout,omitempty" yaml:"probeTimeout,omitempty"`
	ProbeRetries int    `json:"probeRetries,omitempty" yaml:"probeRetries,omitempty"`

	// Classic LoxiLB knobs accepted for wire compatibility; non-default
	// values that ask for something infergate does not serve are rejected.
	Oper            int    `json:"oper,omitempty" yaml:"oper,omitempty"`
	BGP             bool   `json:"bgp,omitempty" yaml:"bgp,omitempty"`
	Managed         bool   `json:"managed,omitempty" yaml:"managed,omitempty"`
	SNAT            bool   `json:"snat,omitempty" yaml:"snat,omitempty"`
	Egress          bool   `json:"egress,omitempty" yaml:"egress,omitempty"`
	ProxyProtocolV2 bool   `json:"proxyprotocolv2,omitempty" yaml:"proxyprotocolv2,omitempty"`
	ID              string `json:"id,omitempty" yaml:"id,omitempty"`
	ProjectID       string `json:"projectId,omitempty" yaml:"projectId,omitempty"`
	BackendProtocol string `json:"backend_protocol,omitempty" yaml:"backend_protocol,omitempty"`
	TraceType       string `json:"trace_type,omitempty" yaml:"trace_type,omitempty"`

	SSEMode                     bool   `json:"sse_mode,omitempty" yaml:"sse_mode,omitempty"`
	MaxStreamDurationSec        int    `json:"max_stream_duration_sec,omitempty" yaml:"max_stream_duration_sec,omitempty"`
	BackendKeepaliveIntervalSec int    `json:"backend_keepalive_interval_sec,omitempty" yaml:"backend_keepalive_interval_sec,omitempty"`
	SessionHeaderName           string `json:"session_header_name,omitempty" yaml:"session_header_name,omitempty"`
	CBEnable                    bool   `json:"cb_enable,omitempty" yaml:"cb_enable,omitempty"`

	CHWBLPrefixHashLevel *int  `json:"chwbl_prefix_hash_level,omitempty" yaml:"chwbl_prefix_hash_level,omitempty"`
	CHWBLPrefixHashFlags *int  `json:"chwbl_prefix_hash_flags,omitempty" yaml:"chwbl_prefix_hash_flags,omitempty"`
	CHWBLMeanLoadFactor  int   `json:"chwbl_mean_load_factor,omitempty" yaml:"chwbl_mean_load_factor,omitempty"`
	CHWBLReplication     int   `json:"chwbl_replication,omitempty" yaml:"chwbl_replication,omitempty"`
	CHWBLEnableCacheSalt *bool `json:"chwbl_enable_cache_salt,omitempty" yaml:"chwbl_enable_cache_salt,omitempty"`

	PDDisaggMode          bool `json:"pd_disagg_mode,omitempty" yaml:"pd_disagg_mode,omitempty"`
	PDCacheAwareMode      bool `json:"pd_cache_aware_mode,omitempty" yaml:"pd_cache_aware_mode,omitempty"`
	PDSessionTTLSec       int  `json:"pd_session_ttl_sec,omitempty" yaml:"pd_session_ttl_sec,omitempty"`
	PDCacheThreshold      int  `json:"pd_cache_threshold,omitempty" yaml:"pd_cache_threshold,omitempty"`
	PDBalanceAbsThreshold int  `json:"pd_balance_abs_threshold,omitempty" yaml:"pd_balance_abs_threshold,omitempty"`
	PDBootstrapPort       int  `json:"pdBootstrapPort,omitempty" yaml:"pdBootstrapPort,omitempty"`
	// PDPairingMode is lenient (default: legs whose transfer facts are
	// unknown pair) or strict (both legs must declare pairing_protocol or
	// kv_connector). An infergate extension (pairing.go).
	PDPairingMode string `json:"pd_pairing_mode,omitempty" yaml:"pd_pairing_mode,omitempty"`
	// PDPrefillPolicy and PDDecodePolicy choose each leg when no affinity
	// tier did (least_load, round_robin, power_of_two; prefill also
	// cache_aware, which turns on prefix affinity). Infergate extensions
	// (pdpolicy.go).
	PDPrefillPolicy string `json:"pd_prefill_policy,omitempty" yaml:"pd_prefill_policy,omitempty"`
	PDDecodePolicy  string `json:"pd_decode_policy,omitempty" yaml:"pd_decode_policy,omitempty"`

	KVExactMode   int    `json:"kvExactMode,omitempty" yaml:"kvExactMode,omitempty"`
	KVEngineType  string `json:"kvEngineType,omitempty" yaml:"kvEngineType,omitempty"`
	KVZmqPort     int    `json:"kvZmqPort,omitempty" yaml:"kvZmqPort,omitempty"`
	KVBlockSize   int    `json:"kvBlockSize,omitempty" yaml:"kvBlockSize,omitempty"`
	KVHashAlgo    string `json:"kvHashAlgo,omitempty" yaml:"kvHashAlgo,omitempty"`
	KVDpRankCount int    `json:"kvDpRankCount,omitempty" yaml:"kvDpRankCount,omitempty"`
	KVWarmupSec   int    `json:"kvWarmupSec,omitempty" yaml:"kvWarmupSec,omitempty"`

	// Tenant controls. APIKeyAuth is LoxiLB's api_key_auth (its newest
	// loxicmd's --api-key-auth): "required" makes the VIP require an API key
	// (X-Api-Key or Authorization: Bearer lxb_…) and enforce its allow-list
	// and limits; "disabled" never does; absent follows LoxiLB's older
	// behaviour, where sse_mode rules enforce keys when the key service runs
	// (the daemon's --sse-mode-enforces-keys).
	APIKeyAuth string `json:"api_key_auth,omitempty" yaml:"api_key_auth,omitempty"`
	// --- LoxiLB compatibility ---
	// AdminStateUp false keeps the rule but its VIP answers 503 admin_down;
	// nil (absent) means true, as in LoxiLB. GET always shows it.
	AdminStateUp *bool `json:"adminStateUp,omitempty" yaml:"adminStateUp,omitempty"`
	// Annotations are opaque key/value pairs, stored and returned verbatim
	// (LoxiLB's limits: 32 keys, 256-character values).
	Annotations map[string]string `json:"annotations,omitempty" yaml:"annotations,omitempty"`
	// --- HTTP surface (an infergate extension; LoxiLB has none) ---
	// AllowedPaths restricts the paths the rule serves: a comma-separated
	// list of exact paths or "prefix/*" (a string, as LoxiLB spells lists);
	// empty = every path is forwarded.
	AllowedPaths string `json:"allowed_paths,omitempty" yaml:"allowed_paths,omitempty"`
	// EngineMetricsPath (an infergate extension) is where the endpoints'
	// Prometheus text is scraped for their queue and KV usage: an absolute
	// path, or "none" to not scrape; empty = the engine's default
	// (/metrics; TensorRT-LLM /prometheus/metrics).
	EngineMetricsPath string `json:"engine_metrics_path,omitempty" yaml:"engine_metrics_path,omitempty"`
	// AllowAdminPaths forwards the engine's admin APIs (/sleep,
	// /flush_cache, /v1/load_lora_adapter, …) to clients; by default they
	// are closed (403 admin_path_denied) whatever allowed_paths says, except
	// a path allowed_paths names exactly.
	AllowAdminPaths bool `json:"allow_admin_paths,omitempty" yaml:"allow_admin_paths,omitempty"`
	// AdmissionWindow (an infergate extension) is how many requests each
	// endpoint may have in flight from this gateway; more wait in the
	// gateway queue (docs/flow-control.md). 0: no window. On P/D rules it bounds
	// the decodes and role-0 endpoints; a prefill is bounded only by its
	// own endpoint field.
	AdmissionWindow int `json:"admission_window,omitempty" yaml:"admission_window,omitempty"`
	// MaxModelLen (an infergate extension) is the engines' context window in
	// tokens (vLLM's --max-model-len); an endpoint may set its own. On a
	// P/D rule whose KV-exact tier tokenised the prompt, a prompt that does
	// not fit the chosen pair's window is refused before any leg is sent
	// (docs/datapath.md). 0: unknown.
	MaxModelLen int `json:"max_model_len,omitempty" yaml:"max_model_len,omitempty"`
	// Edge hardening: LoxiLB's per-VIP client connection cap
	// (0 = none). Rules sharing a VIP:port share the smallest non-zero cap.
	ConnectionLimit int `json:"connectionLimit,omitempty" yaml:"connectionLimit,omitempty"`
	// --- TLS: LoxiLB's TLS surface, meaningful with security 1
	// (terminate at the VIP) and 2 (terminate and re-encrypt to engines).
	// See docs/tls.md and tls.go for validation and defaults.
	TLSVersions           []string      `json:"tls_versions,omitempty" yaml:"tls_versions,omitempty"`
	TLSCiphers            string        `json:"tls_ciphers,omitempty" yaml:"tls_ciphers,omitempty"`
	ALPNProtocols         []string      `json:"alpn_protocols,omitempty" yaml:"alpn_protocols,omitempty"`
	HSTSMaxAge            int           `json:"hsts_max_age,omitempty" yaml:"hsts_max_age,omitempty"`
	HSTSIncludeSubdomains bool          `json:"hsts_include_subdomains,omitempty" yaml:"hsts_include_subdomains,omitempty"`
	HSTSPreload           bool          `json:"hsts_preload,omitempty" yaml:"hsts_preload,omitempty"`
	MTLSFrontend          *MTLSFrontend `json:"mtls_frontend,omitempty" yaml:"mtls_frontend,omitempty"`
	MTLSBackend           *MTLSBackend  `json:"mtls_backend,omitempty" yaml:"mtls_backend,omitempty"`
}

// MTLSFrontend is client-certificate authentication of clients at the VIP
// (LoxiLB's mtls_frontend; security 1 or 2).
type MTLSFrontend struct {
	ClientCertMode   string `json:"client_cert_mode,omitempty" yaml:"client_cert_mode,omitempty"`
	ClientCAPath     string `json:"client_ca_path,omitempty" yaml:"client_ca_path,omitempty"`
	ClientCACertData string `json:"client_ca_cert_data,omitempty" yaml:"client_ca_cert_data,omitempty"`
	RequireClientCN  bool   `json:"require_client_cn,omitempty" yaml:"require_client_cn,omitempty"`
	ClientCNPattern  string `json:"client_cn_pattern,omitempty" yaml:"client_cn_pattern,omitempty"`
	ClientCRLPath    string `json:"client_crl_path,omitempty" yaml:"client_crl_path,omitempty"`
}

// MTLSBackend is the TLS leg to engines (LoxiLB's mtls_backend; security 2).
// VerifyServerCert is a pointer because its default here is true (LoxiLB's
// is false): only an explicit false turns verification off.
type MTLSBackend struct {
	VerifyServerCert *bool  `json:"verify_server_cert,omitempty" yaml:"verify_server_cert,omitempty"`
	BackendCAPath    string `json:"backend_ca_path,omitempty" yaml:"backend_ca_path,omitempty"`
	ClientCertPath   string `json:"client_cert_path,omitempty" yaml:"client_cert_path,omitempty"`
	ClientKeyPath    string `json:"client_key_path,omitempty" yaml:"client_key_path,omitempty"`
	ClientCertData   string `json:"client_cert_data,omitempty" yaml:"client_cert_data,omitempty"`
	// ClientKeyData is inline key material: GET shows tlsmat.Redacted.
	ClientKeyData string `json:"client_key_data,omitempty" yaml:"client_key_data,omitempty"`
}

// Endpoint is one backend engine of a rule.
type Endpoint struct {
	EndpointIP string `json:"endpointIP" yaml:"endpointIP"`
	TargetPort int    `json:"targetPort" yaml:"targetPort"`
	Weight     int    `json:"weight" yaml:"weight"`
	EPRole     int    `json:"ep_role,omitempty" yaml:"ep_role,omitempty"`
	NixlPort   int    `json:"nixl_port,omitempty" yaml:"nixl_port,omitempty"`
	Backup     bool   `json:"backup,omitempty" yaml:"backup,omitempty"`
	// Output only (GET): health state and counters from the datapath.
	State   string `json:"state,omitempty" yaml:"state,omitempty"`
	Counter string `json:"counter,omitempty" yaml:"counter,omitempty"`

	// --- LoxiLB compatibility ---
	// HTTP health-probe overrides for this endpoint (Octavia health
	// monitor): method GET or HEAD, request path, accepted status codes
	// ("200", "200,202", "200-204"). They need probetype http or https.
	HTTPMethod    string `json:"httpMethod,omitempty" yaml:"httpMethod,omitempty"`
	URLPath       string `json:"urlPath,omitempty" yaml:"urlPath,omitempty"`
	ExpectedCodes string `json:"expectedCodes,omitempty" yaml:"expectedCodes,omitempty"`
	// SubnetID is Octavia's member subnet: stored and returned, never used.
	SubnetID string `json:"subnetId,omitempty" yaml:"subnetId,omitempty"`
	// Health is output only (GET): infergate's finer endpoint state
	// (probing, active, down, draining, breaker-open) next to LoxiLB's
	// active/inactive State.
	Health string `json:"health,omitempty" yaml:"health,omitempty"`

	// --- P/D pairing facts (infergate extensions, pairing.go) ---
	// A prefill hands its KV only to a decode that speaks the same
	// transfer: these declare what this engine speaks. Unset facts are
	// unknown (they pair in lenient mode).
	KVConnector     string `json:"kv_connector,omitempty" yaml:"kv_connector,omitempty"`
	KVBlockSize     int    `json:"kv_block_size,omitempty" yaml:"kv_block_size,omitempty"`
	KVCacheDtype    string `json:"kv_cache_dtype,omitempty" yaml:"kv_cache_dtype,omitempty"`
	PairingProtocol string `json:"pairing_protocol,omitempty" yaml:"pairing_protocol,omitempty"`
	// BootstrapPort is an SGLang prefill's own bootstrap port (0: the
	// rule's pdBootstrapPort), or a vLLM MooncakeConnector prefill's
	// (0: vLLM's default).
	BootstrapPort int `json:"bootstrap_port,omitempty" yaml:"bootstrap_port,omitempty"`
	// AdmissionWindow overrides the rule's admission_window for this
	// endpoint (0: the rule's; an engine's max_num_seqs or
	// max_running_requests is the natural value).
	AdmissionWindow int `json:"admission_window,omitempty" yaml:"admission_window,omitempty"`
	// MaxModelLen overrides the rule's max_model_len for this endpoint
	// (0: the rule's).
	MaxModelLen int `json:"max_model_len,omitempty" yaml:"max_model_len,omitempty"`
	// Labels are free-form key/value labels, stored and shown.
	Labels map[string]string `json:"labels,omitempty" yaml:"labels,omitempty"`

	// EngineLoad is output only (GET): the engine's own queue, running
	// batch, KV usage and last-scrape age from its metrics, on one line
	// (spec.EngineStatus.Summary); empty when not scraped.
	EngineLoad string `json:"engineLoad,omitempty" yaml:"engineLoad,omitempty"`
	// WindowLoad is output only (GET): the endpoint's admission window
	// against the requests holding its slots, "in flight/limit" with
	// ",full" at the window (spec.WindowStatus.Summary); empty without a
	// window.
	WindowLoad string `json:"windowLoad,omitempty" yaml:"windowLoad,omitempty"`
}

// SecondaryIP is LoxiLB's SCTP multi-homing address (accepted, never served).
type SecondaryIP struct {
	SecondaryIP string `json:"secondaryIP" yaml:"secondaryIP"`
}

// SecondaryVIP is one further address a rule is served on.
type SecondaryVIP struct {
	Address  string `json:"address" yaml:"address"`
	SubnetID string `json:"subnetId,omitempty" yaml:"subnetId,omitempty"`
	PortID   string `json:"portId,omitempty" yaml:"portId,omitempty"`
	Proto    string `json:"proto,omitempty" yaml:"proto,omitempty"`
}

// AllowedSource is a source prefix allowed to reach the VIP.
type AllowedSource struct {
	Prefix string `json:"prefix" yaml:"prefix"`
}

// RuleStatus is the output-only runtime view of a rule.
type RuleStatus struct {
	Ready  bool   `json:"ready"`
	Reason string `json:"reason,omitempty"`
	// Queue is the rule's gateway queue on one line
	// (spec.QueueStatus.Summary); empty without admission windows.
	Queue string `json:"queue,omitempty"`
}

// RuleList is the GET /config/loadbalancer/all envelope.
type RuleList struct {
	LbAttr []Rule `json:"lbAttr"`
}
