package spec

import (
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/infergate/infergate/tlsmat"
)

// Role is an endpoint's part in prefill/decode disaggregation (wire: ep_role).
type Role uint8

const (
	RoleAny     Role = 0 // serves whole requests
	RolePrefill Role = 1 // prefill / TensorRT-LLM CONTEXT
	RoleDecode  Role = 2 // decode / TensorRT-LLM GENERATION
)

func (r Role) String() string {
	switch r {
	case RoleAny:
		return "any"
	case RolePrefill:
		return "prefill"
	case RoleDecode:
		return "decode"
	}
	return "role(" + strconv.Itoa(int(r)) + ")"
}

// Selector is the single-pool endpoint selection algorithm (wire: sel).
type Selector uint8

const (
	SelRoundRobin    Selector = 0
	SelSourceHash    Selector = 1
	SelWeightedRR    Selector = 2
	SelPersist       Selector = 3
	SelLeastConn     Selector = 4
	SelCHWBL         Selector = 8
	SelWeightedCHWBL Selector = 10
)

func (s Selector) String() string {
	switch s {
	case SelRoundRobin:
		return "rr"
	case SelSourceHash:
		return "hash"
	case SelWeightedRR:
		return "priority"
	case SelPersist:
		return "persist"
	case SelLeastConn:
		return "lc"
	case SelCHWBL:
		return "chwbl"
	case SelWeightedCHWBL:
		return "wrr-hash"
	}
	return "sel(" + strconv.Itoa(int(s)) + ")"
}

// Engine is the inference engine family behind a rule (wire: kvEngineType).
type Engine string

const (
	EngineVLLM     Engine = "vllm"
	EngineSGLang   Engine = "sglang"
	EngineTRTLLM   Engine = "trtllm"
	EngineLlamaCpp Engine = "llamacpp"
)

// Key identifies a rule: LoxiLB's composite key. Several rules may share
// VIP:port:protocol when they differ in host, path or model (multi-model
// pools on one VIP); they then share one listener.
type Key struct {
	VIP           netip.Addr
	Port          uint16
	Protocol      string
	Block         uint32
	Host          string
	PathPrefix    string
	PathMatchMode string // "" (disabled), "prefix" or "exact"
	ModelName     string
}

// ListenAddr is the VIP:port a rule is served on.
func (k Key) ListenAddr() netip.AddrPort { return netip.AddrPortFrom(k.VIP, k.Port) }

func (k Key) String() string {
	s := fmt.Sprintf("%s|%s", netip.AddrPortFrom(k.VIP, k.Port), k.Protocol)
	if k.Block != 0 {
		s += fmt.Sprintf("|block=%d", k.Block)
	}
	if k.Host != "" {
		s += "|host=" + k.Host
	}
	if k.PathPrefix != "" {
		s += "|path=" + k.PathPrefix + "(" + k.PathMatchMode + ")"
	}
	if k.ModelName != "" {
		s += "|model=" + k.ModelName
	}
	return s
}

// Endpoint is one backend engine with every default resolved.
type Endpoint struct {
	// ID is "ip:port", stable across updates; metrics and status use it.
	ID     string
	Addr   netip.AddrPort
	Weight int // 0 drains: no new requests, in-flight ones finish
	Role   Role
	// NixlPort is the vLLM NIXL side-channel port (wire 0 → targetPort).
	NixlPort uint16
	Backup   bool

	// --- LoxiLB compatibility ---
	// Probe is this endpoint's own probe when the wire endpoint overrides
	// httpMethod/urlPath/expectedCodes; nil = the rule's probe.
	Probe *Probe
	// --- engine self-registration ---
	// PairFacts are the facts a registered engine advertised that must
	// match across a prefill/decode pair (e.g. block_size, kv_connector);
	// nil when nothing is advertised or declared (any pair goes, unless
	// the rule pairs strictly). Static endpoints declare them with
	// kv_connector, kv_block_size, kv_cache_dtype and pairing_protocol.
	// Keys are the Fact… constants.
	PairFacts map[string]string
	// BootstrapPort is an SGLang prefill's own bootstrap port; 0 → the
	// rule's PD.BootstrapPort.
	BootstrapPort uint16
	// Labels are free-form operator labels (stored, shown, not routed on).
	Labels map[string]string
	// Window is this endpoint's own admission window (0: the rule's; see
	// Rule.WindowOf).
	Window int
	// MaxModelLen is this endpoint's own context window in tokens (0: the
	// rule's; see Rule.MaxModelLenOf).
	MaxModelLen int
}

// PairingKey is pair facts as one stable string, "k=v,…" in key order ("" for
// none): the form /status and `get lb -o wide` show.
func PairingKey(facts map[string]string) string {
	if len(facts) == 0 {
		return ""
	}
	keys := make([]string, 0, len(facts))
	for k := range facts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + facts[k])
	}
	return b.String()
}

// Pair facts: keys of Endpoint.PairFacts, the transfer facts a
// prefill/decode pair must agree on when both legs know them.
const (
	FactBlockSize       = "block_size"
	FactKVConnector     = "kv_connector"
	FactKVCacheDtype    = "kv_cache_dtype"
	FactPairingProtocol = "pairing_protocol"
)

// SessionSource says where the sticky-session key of sel 3 comes from.
type SessionSource uint8

const (
	SessionFromSourceIP SessionSource = iota // session_header_name empty
	SessionFromHeader                        // "X-User"
	SessionFromCookie                        // "cookie:<name>"
	SessionFromQuery                         // "query:<name>"
)

// SessionKey is the parsed session_header_name.
type SessionKey struct {
	Source SessionSource
	Name   string
}

// Probe is the active health probe of every endpoint of a rule.
type Probe struct {
	Type     string // "http", "https", "tcp" or "none"
	Port     uint16 // 0: the endpoint's own port
	Request  string // HTTP path for http/https
	Response string // expected body substring ("" = any 2xx)
	Timeout  time.Duration
	Retries  int // consecutive failures before an endpoint is marked down

	// --- LoxiLB compatibility ---
	Method string    // HTTP method ("" = GET)
	Codes  StatusSet // accepted status codes (empty = any 2xx)
}

// PD is the prefill/decode disaggregation configuration (pd_disagg_mode).
type PD struct {
	CacheAware          bool          // pd_cache_aware_mode: Tier 1 prefix affinity
	SessionTTL          time.Duration // pd_session_ttl_sec, 0 → 300 s
	CacheThreshold      int           // pd_cache_threshold percent, 0 → 20
	BalanceAbsThreshold int           // pd_balance_abs_threshold, 0 → 3
	BootstrapPort       uint16        // SGLang pdBootstrapPort, 0 → 8998
	// PairingStrict is pd_pairing_mode strict: both legs of a pair must
	// declare a pairing_protocol or a kv_connector (lenient, the default,
	// pairs legs whose facts are unknown).
	PairingStrict bool
	// PrefillPolicy and DecodePolicy choose a leg when no affinity tier
	// did (pd_prefill_policy, pd_decode_policy); "" is PolicyLeastLoad.
	PrefillPolicy Policy
	DecodePolicy  Policy
}

// Policy is how a P/D leg is chosen among usable endpoints when no
// affinity tier (session, prefix, KV-exact) chose it.
type Policy string

const (
	// PolicyLeastLoad: fewest requests in flight, exact ties rotating.
	PolicyLeastLoad Policy = "least_load"
	// PolicyRoundRobin: each endpoint in turn, whatever its load.
	PolicyRoundRobin Policy = "round_robin"
	// PolicyPowerOfTwo: the less loaded of two endpoints drawn at random.
	PolicyPowerOfTwo Policy = "power_of_two"
	// PolicyCacheAware (prefill only): prefix affinity first
	// (pd_cache_aware_mode), then least load.
	PolicyCacheAware Policy = "cache_aware"
)

// KV is the KV-exact (Tier 1.5) configuration; nil when kvExactMode is 0.
type KV struct {
	Mode      int    // 1: prefill endpoints of a P/D rule; 3: whole single pool
	ZMQPort   uint16 // kvZmqPort, 0 → 5557; DP rank r publishes on ZMQPort+r
	BlockSize int    // kvBlockSize, 0 → 16 (fallback; learned from events)
	HashAlgo  string // kvHashAlgo, "" → engine default
	DPRanks   int    // kvDpRankCount, 0 → 1
	Warmup    time.Duration
}

// CHWBL is consistent hashing with bounded loads (sel 8, 10).
type CHWBL struct {
	PrefixHashLevel int // 1..3, default 1
	PrefixHashFlags int
	MeanLoadFactor  int // percent of mean load, default 175
	Replication     int // virtual nodes per endpoint, default 100
	CacheSalt       bool
}

// Rule is one compiled rule. Never mutate it; compile a new one.
type Rule struct {
	Key        Key
	Name       string
	Generation uint64 // increases with every accepted change of this rule

	Selector          Selector
	Session           SessionKey
	Probe             Probe
	SSE               bool
	MaxStreamDuration time.Duration // 0: no cap beyond the daemon's
	IdleTimeout       time.Duration // inactiveTimeOut
	CircuitBreaker    bool          // cb_enable (always true for P/D rules)

	Engine Engine
	PD     *PD    // nil unless pd_disagg_mode
	KV     *KV    // nil unless kvExactMode != 0
	CHWBL  *CHWBL // nil unless sel 8 or 10

	Endpoints []Endpoint // in request order

	// APIKeys is the rule's tenant-key policy (api_key_auth).
	APIKeys KeyPolicy
	// --- LoxiLB compatibility ---
	// AdminDown (adminStateUp false): the rule stays configured but its
	// addresses answer 503 admin_down and nothing is sent to engines.
	AdminDown bool
	// SecondaryVIPs are further addresses the rule is served on (same port).
	SecondaryVIPs []netip.Addr
	// --- HTTP surface ---
	// AllowedPaths (allowed_paths, an infergate extension) restricts the
	// paths the rule serves: exact entries, or "prefix/*"; empty = all.
	AllowedPaths []string
	// Admin is the rule's policy for its engine's admin paths (/sleep,
	// /flush_cache, …): closed to clients unless the rule opens them.
	Admin AdminSurface
	// ConnectionLimit caps client connections on the rule's VIP:port
	// (LoxiLB connectionLimit); 0: no per-VIP cap.
	ConnectionLimit int
	// TLS is nil for plaintext rules (security 0).
	TLS *TLS
	// --- engine self-registration ---
	// EndpointSelector, when set, means Endpoints come from engine
	// registrations (rules/selector fills them in before install).
	EndpointSelector *EndpointSelector
	// EngineMetricsPath is where the engines' Prometheus text is scraped
	// for their queue and KV usage (engine_metrics_path; default from the
	// engine: /metrics, TensorRT-LLM /prometheus/metrics); "" = not scraped.
	EngineMetricsPath string
	// AdmissionWindow is the requests each endpoint may have in flight
	// from this gateway (admission_window; 0: none), unless the endpoint
	// sets its own (WindowOf).
	AdmissionWindow int
	// MaxModelLen is the engines' context window in tokens
	// (max_model_len; 0: unknown), unless an endpoint sets its own.
	MaxModelLen int
}

// MaxModelLenOf is endpoint i's context window in tokens (0: unknown): its
// own, else the rule's.
func (r *Rule) MaxModelLenOf(i int) int {
	if n := r.Endpoints[i].MaxModelLen; n > 0 {
		return n
	}
	return r.MaxModelLen
}

// WindowOf is endpoint i's admission window (0: none): its own, else the
// rule's, except that a P/D rule's prefills take only their own (a
// prefill leg is short and each request also holds its decode's slot).
func (r *Rule) WindowOf(i int) int {
	e := &r.Endpoints[i]
	if e.Window > 0 {
		return e.Window
	}
	if r.PD != nil && e.Role == RolePrefill {
		return 0
	}
	return r.AdmissionWindow
}

// AdminSurface says which engine admin paths a rule keeps from clients.
// The paths themselves are engine knowledge (datapath/pd's per-engine
// lists); the rule only names the engine and whether it opens them.
type AdminSurface struct {
	// Engine whose admin paths are closed; "" (kvEngineType absent: the
	// engine is not known) closes every known engine's.
	Engine Engine
	// Open (allow_admin_paths) forwards admin paths like any other path.
	Open bool
}

// EndpointSelector picks a rule's endpoints from the engines registered
// under Prefix + "/engines/". Empty Engine matches the rule's.
type EndpointSelector struct {
	Prefix string
	Model  string
	Engine string
}

// KeyPolicy says whether a VIP requires tenant API keys.
type KeyPolicy uint8

const (
	// KeysIfSSEMode: api_key_auth absent; keys are enforced when the rule has
	// sse_mode and the daemon enforces keys on sse_mode rules (LoxiLB).
	KeysIfSSEMode KeyPolicy = iota
	KeysRequired            // api_key_auth: required
	KeysOff                 // api_key_auth: disabled
)

// EndpointStatus is the runtime view of one endpoint.
type EndpointStatus struct {
	State   string // "probing", "active", "down", "draining", "inactive"
	Breaker string // "closed", "open", "half-open"

	// --- LoxiLB compatibility: the endpoint "counter" ---
	Requests uint64 // requests that reached the engine (P/D: every leg)
	Bytes    uint64 // request bodies sent + response bodies relayed

	// PairingKey is the endpoint's P/D pairing facts as "k=v,…" (sorted;
	// "" when it states none).
	PairingKey string
	// BootstrapPort and Labels are the endpoint's own (Endpoint's), so an
	// endpointSelector rule's registered endpoints show theirs; shared with
	// the compiled rule, never written.
	BootstrapPort uint16
	Labels        map[string]string
	// Engine is the engine's own load from its metrics; nil when the
	// endpoint is not scraped or no scrape finished yet.
	Engine *EngineStatus
	// Window is the endpoint's admission window and its occupancy; nil
	// when the rule sets no window.
	Window *WindowStatus
}

// EngineStatus is an endpoint's engine-reported load as of its last good
// scrape, and the outcome of its latest scrape.
type EngineStatus struct {
	Engine string `json:"engine"`
	// Valid: the values are fresh and taken; routing may use them.
	Valid   bool    `json:"valid"`
	Waiting int     `json:"waiting"`
	Running int     `json:"running"`
	KVUsage float64 `json:"kv_usage"` // 0..1; -1 not exported
	// AgeSec is the seconds since the last good scrape (-1: none yet).
	AgeSec float64 `json:"age_sec"`
	// Result is the latest scrape's outcome: ok or the reason it was not
	// taken (connect_error, timeout, http_status, too_large, parse_error,
	// invalid_value, no_signal, counter_reset).
	Result string `json:"result"`
	// LoRA adapters running and waiting (vLLM), when exported.
	LoRARunning []string `json:"lora_running,omitempty"`
	LoRAWaiting []string `json:"lora_waiting,omitempty"`
}

// Summary is the status on one line for tables: "waiting=3,running=12,
// kv=41%,age=0.2s" while valid; "ignored:<result>,age=…" when the signal is
// stale or the latest scrape was not taken and none is fresh; "" for nil.
func (s *EngineStatus) Summary() string {
	if s == nil {
		return ""
	}
	age := "age=-"
	if s.AgeSec >= 0 {
		age = "age=" + strconv.FormatFloat(s.AgeSec, 'f', 1, 64) + "s"
	}
	if !s.Valid {
		r := s.Result
		if r == "ok" || r == "counter_reset" {
			r = "stale"
		}
		return "ignored:" + r + "," + age
	}
	kv := "-"
	if s.KVUsage >= 0 {
		kv = strconv.Itoa(int(s.KVUsage*100+0.5)) + "%"
	}
	return "waiting=" + strconv.Itoa(s.Waiting) + ",running=" + strconv.Itoa(s.Running) + ",kv=" + kv + "," + age
}

// RuleStatus is the runtime view of a rule, reported by the datapath.
type RuleStatus struct {
	Ready     bool
	Reason    string // why not ready, e.g. "no usable decode endpoint"
	Endpoints map[string]EndpointStatus
	// Refused lists, for an endpointSelector rule, each registration the
	// rule cannot use ("ip:port" → reason).
	Refused map[string]string
	// Queue is the rule's gateway queue; nil when the rule sets no
	// admission window.
	Queue *QueueStatus
}

// --- LoxiLB compatibility ---

// StatusSet is a set of HTTP status codes 100..599 a probe accepts. It is
// a bitmap so spec.Probe stays comparable; the zero value (empty) means the
// default: any 2xx.
type StatusSet struct{ bits [8]uint64 }

// Add puts codes lo..hi (inclusive, clamped to 100..599) in the set.
func (s *StatusSet) Add(lo, hi int) {
	for c := max(lo, 100); c <= min(hi, 599); c++ {
		i := c - 100
		s.bits[i/64] |= 1 << (i % 64)
	}
}

// Empty reports whether no code was added.
func (s StatusSet) Empty() bool { return s == StatusSet{} }

// Accepts reports whether code is in the set (any 2xx when empty).
func (s StatusSet) Accepts(code int) bool {
	if s.Empty() {
		return code >= 200 && code <= 299
	}
	if code < 100 || code > 599 {
		return false
	}
	i := code - 100
	return s.bits[i/64]&(1<<(i%64)) != 0
}

// ServedAddrs are the VIP:port addresses a rule listens on: its key's VIP
// first, then its secondary VIPs.
func (r *Rule) ServedAddrs() []netip.AddrPort {
	out := make([]netip.AddrPort, 0, 1+len(r.SecondaryVIPs))
	out = append(out, r.Key.ListenAddr())
	for _, a := range r.SecondaryVIPs {
		out = append(out, netip.AddrPortFrom(a, r.Key.Port))
	}
	return out
}

// --- TLS ---

// Security modes (wire: security).
const (
	SecurityPlain     = 0
	SecurityTerminate = 1 // TLS at the VIP, plaintext to engines
	SecurityEndToEnd  = 2 // TLS at the VIP and TLS to engines
)

// TLS is a rule's resolved TLS configuration: the VIP side always, the
// engine side for security 2. The params are plain data; the datapath turns
// them into crypto/tls configurations through tlsmat.
type TLS struct {
	Security int
	Server   tlsmat.ServerParams
	Backend  *tlsmat.ClientParams // security 2 only
}
