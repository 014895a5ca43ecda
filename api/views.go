package api

import (
	"github.com/infergate/infergate/spec"
	"github.com/infergate/infergate/swagger"
)

// CompiledView is the JSON form of a compiled rule (GET …/compiled). Every
// field is always present, defaults included: its purpose is to show what the
// datapath actually runs. Durations are seconds.
type CompiledView struct {
	Key                  KeyView            `json:"key"`
	Name                 string             `json:"name"`
	Generation           uint64             `json:"generation"`
	Selector             string             `json:"selector"`
	SelectorID           int                `json:"selector_id"`
	Session              SessionView        `json:"session"`
	Probe                ProbeView          `json:"probe"`
	SSE                  bool               `json:"sse"`
	MaxStreamDurationSec float64            `json:"max_stream_duration_sec"`
	IdleTimeoutSec       float64            `json:"idle_timeout_sec"`
	CircuitBreaker       bool               `json:"circuit_breaker"`
	Engine               string             `json:"engine"`
	PD                   *PDView            `json:"pd"`
	KV                   *KVView            `json:"kv"`
	CHWBL                *CHWBLView         `json:"chwbl"`
	Endpoints            []CompiledEndpoint `json:"endpoints"`
}

// KeyView is the composite rule key.
type KeyView struct {
	VIP           string `json:"vip"`
	Port          uint16 `json:"port"`
	Protocol      string `json:"protocol"`
	Block         uint32 `json:"block"`
	Host          string `json:"host"`
	PathPrefix    string `json:"path_prefix"`
	PathMatchMode string `json:"path_match_mode"`
	ModelName     string `json:"model_name"`
}

// SessionView is where the sticky-session key comes from.
type SessionView struct {
	Source string `json:"source"` // source_ip, header, cookie, query
	Name   string `json:"name"`
}

// ProbeView is the resolved health probe.
type ProbeView struct {
	Type       string  `json:"type"`
	Port       uint16  `json:"port"`
	Request    string  `json:"request"`
	Response   string  `json:"response"`
	TimeoutSec float64 `json:"timeout_sec"`
	Retries    int     `json:"retries"`
}

// PDView is the resolved prefill/decode configuration.
type PDView struct {
	CacheAware          bool    `json:"cache_aware"`
	SessionTTLSec       float64 `json:"session_ttl_sec"`
	CacheThreshold      int     `json:"cache_threshold"`
	BalanceAbsThreshold int     `json:"balance_abs_threshold"`
	BootstrapPort       uint16  `json:"bootstrap_port"`
}

// KVView is the resolved KV-exact configuration.
type KVView struct {
	Mode      int     `json:"mode"`
	ZMQPort   uint16  `json:"zmq_port"`
	BlockSize int     `json:"block_size"`
	HashAlgo  string  `json:"hash_algo"`
	DPRanks   int     `json:"dp_ranks"`
	WarmupSec float64 `json:"warmup_sec"`
}

// CHWBLView is the resolved consistent-hash-with-bounded-loads configuration.
type CHWBLView struct {
	PrefixHashLevel int  `json:"prefix_hash_level"`
	PrefixHashFlags int  `json:"prefix_hash_flags"`
	MeanLoadFactor  int  `json:"mean_load_factor"`
	Replication     int  `json:"replication"`
	CacheSalt       bool `json:"cache_salt"`
}

// CompiledEndpoint is one resolved endpoint.
type CompiledEndpoint struct {
	ID       string `json:"id"`
	Address  string `json:"address"`
	Weight   int    `json:"weight"`
	Role     string `json:"role"`
	NixlPort uint16 `json:"nixl_port"`
	Backup   bool   `json:"backup"`
}

// StatusView is GET …/status: the rule's runtime readiness and each
// endpoint's health and breaker state, keyed by endpoint ID.
type StatusView struct {
	Ready     bool                          `json:"ready"`
	Reason    string                        `json:"reason"`
	Endpoints map[string]EndpointStatusView `json:"endpoints"`
	// TLS is the certificate in use for a security 1/2 rule.
	TLS *TLSStatusView `json:"tls,omitempty"`
	// RefusedRegistrations: an endpointSelector rule's registrations it
	// cannot use, "ip:port" → reason.
	RefusedRegistrations map[string]string `json:"refused_registrations,omitempty"`
	// Queue is the rule's gateway queue (length, by class, oldest wait,
	// sheds since it was made); absent when the rule sets no admission
	// window.
	Queue *spec.QueueStatus `json:"queue,omitempty"`
}

// TLSStatusView is the certificate a TLS rule serves, with its expiry.
type TLSStatusView struct {
	Security     int      `json:"security"`
	Hostname     string   `json:"hostname"` // "default" for the VIP default certificate
	CertPath     string   `json:"certPath"`
	Subject      string   `json:"subject"`
	Issuer       string   `json:"issuer"`
	Serial       string   `json:"serial"`
	DNSNames     []string `json:"dnsNames,omitempty"`
	NotAfter     string   `json:"notAfter"` // RFC 3339
	ExpiresInSec int64    `json:"expiresInSec"`
}

// EndpointStatusView is one endpoint's runtime state.
type EndpointStatusView struct {
	State   string `json:"state"`
	Breaker string `json:"breaker"`
	// PairingKey is the endpoint's P/D pairing facts, "k=v,…" (omitted
	// when it states none).
	PairingKey string `json:"pairing_key,omitempty"`
	// BootstrapPort and Labels are the endpoint's own (a registered
	// endpoint's from its registration); omitted when unset.
	BootstrapPort uint16            `json:"bootstrap_port,omitempty"`
	Labels        map[string]string `json:"labels,omitempty"`
	// Engine is the engine's own load from its metrics (queue, running
	// batch, KV usage, last-scrape age, latest scrape result); absent when
	// the endpoint is not scraped or no scrape finished yet.
	Engine *spec.EngineStatus `json:"engine,omitempty"`
	// Window is the endpoint's admission window against the requests
	// holding its slots now; absent when the rule sets no window.
	Window *spec.WindowStatus `json:"window,omitempty"`
}

// reasonNoRuntime is reported when no datapath status is available, so a
// client never mistakes "unknown" for "ready".
const reasonNoRuntime = "no runtime status available"

// Views hands the API's response types to the OpenAPI generator so their
// schemas are reflected from the same structs the handlers encode.
func Views() swagger.Views {
	return swagger.Views{
		Result:   ResultBody{},
		Error:    ErrorBody{},
		Compiled: CompiledView{},
		Status:   StatusView{},
	}
}

func sessionSourceName(s spec.SessionSource) string {
	switch s {
	case spec.SessionFromSourceIP:
		return "source_ip"
	case spec.SessionFromHeader:
		return "header"
	case spec.SessionFromCookie:
		return "cookie"
	case spec.SessionFromQuery:
		return "query"
	}
	return "unknown"
}

func compiledViewOf(r *spec.Rule) CompiledView {
	v := CompiledView{
		Key: KeyView{
			VIP: r.Key.VIP.String(), Port: r.Key.Port, Protocol: r.Key.Protocol, Block: r.Key.Block,
			Host: r.Key.Host, PathPrefix: r.Key.PathPrefix, PathMatchMode: r.Key.PathMatchMode,
			ModelName: r.Key.ModelName,
		},
		Name:       r.Name,
		Generation: r.Generation,
		Selector:   r.Selector.String(),
		SelectorID: int(r.Selector),
		Session:    SessionView{Source: sessionSourceName(r.Session.Source), Name: r.Session.Name},
		Probe: ProbeView{
			Type: r.Probe.Type, Port: r.Probe.Port, Request: r.Probe.Request, Response: r.Probe.Response,
			TimeoutSec: r.Probe.Timeout.Seconds(), Retries: r.Probe.Retries,
		},
		SSE:                  r.SSE,
		MaxStreamDurationSec: r.MaxStreamDuration.Seconds(),
		IdleTimeoutSec:       r.IdleTimeout.Seconds(),
		CircuitBreaker:       r.CircuitBreaker,
		Engine:               string(r.Engine),
		Endpoints:            make([]CompiledEndpoint, 0, len(r.Endpoints)),
	}
	if r.PD != nil {
		v.PD = &PDView{
			CacheAware: r.PD.CacheAware, SessionTTLSec: r.PD.SessionTTL.Seconds(),
			CacheThreshold: r.PD.CacheThreshold, BalanceAbsThreshold: r.PD.BalanceAbsThreshold,
			BootstrapPort: r.PD.BootstrapPort,
		}
	}
	if r.KV != nil {
		v.KV = &KVView{
			Mode: r.KV.Mode, ZMQPort: r.KV.ZMQPort, BlockSize: r.KV.BlockSize, HashAlgo: r.KV.HashAlgo,
			DPRanks: r.KV.DPRanks, WarmupSec: r.KV.Warmup.Seconds(),
		}
	}
	if r.CHWBL != nil {
		v.CHWBL = &CHWBLView{
			PrefixHashLevel: r.CHWBL.PrefixHashLevel, PrefixHashFlags: r.CHWBL.PrefixHashFlags,
			MeanLoadFactor: r.CHWBL.MeanLoadFactor, Replication: r.CHWBL.Replication,
			CacheSalt: r.CHWBL.CacheSalt,
		}
	}
	for _, ep := range r.Endpoints {
		v.Endpoints = append(v.Endpoints, CompiledEndpoint{
			ID: ep.ID, Address: ep.Addr.String(), Weight: ep.Weight, Role: ep.Role.String(),
			NixlPort: ep.NixlPort, Backup: ep.Backup,
		})
	}
	return v
}

// statusViewOf renders runtime status; without one the rule is reported not
// ready with an explicit reason.
func statusViewOf(st spec.RuleStatus, ok bool) StatusView {
	v := StatusView{Endpoints: map[string]EndpointStatusView{}}
	if !ok {
		v.Reason = reasonNoRuntime
		return v
	}
	v.Ready, v.Reason = st.Ready, st.Reason
	v.RefusedRegistrations = st.Refused
	v.Queue = st.Queue
	for id, es := range st.Endpoints {
		v.Endpoints[id] = EndpointStatusView{State: es.State, Breaker: es.Breaker, PairingKey: es.PairingKey, Engine: es.Engine, Window: es.Window,
			BootstrapPort: es.BootstrapPort, Labels: es.Labels}
	}
	return v
}
