package rules

import (
	"net/netip"
	"slices"
	"time"

	"github.com/infergate/infergate/spec"
)

// Compile-time defaults for "0 means default" wire fields. They follow
// LoxiLB's effective defaults (reference §2, §6.2); the choices LoxiLB leaves
// open are documented in doc.go.
const (
	defaultPDSessionTTL     = 300 * time.Second
	defaultPDCacheThreshold = 20
	defaultPDBalanceAbs     = 3
	defaultPDBootstrapPort  = 8998
	defaultKVDpRanks        = 1
	defaultProbeTimeout     = 2 * time.Second
	defaultProbeRetries     = 2
	defaultProbeHTTPPath    = "/health"
	defaultIdleTimeout      = 240 * time.Second // LoxiLB's tcp default
	defaultCHWBLHashLevel   = 1
	defaultCHWBLLoadFactor  = 175 // LoxiLB's effective default (swagger's 125 is not applied)
	defaultCHWBLReplication = 100
)

// Compile validates r and resolves every default into an immutable
// spec.Rule. Generation is left 0: the store stamps it on commit.
func Compile(r Rule) (*spec.Rule, error) {
	if err := Validate(r); err != nil {
		return nil, err
	}
	return compileValid(&r), nil
}

// compileValid builds the spec of an already validated rule.
func compileValid(r *Rule) *spec.Rule {
	sa := &r.ServiceArguments
	eng := engineOf(sa)
	out := &spec.Rule{
		Key:               keyOfValid(sa),
		Name:              sa.Name,
		Selector:          spec.Selector(sa.Sel),
		SSE:               sa.SSEMode,
		MaxStreamDuration: seconds(sa.MaxStreamDurationSec),
		IdleTimeout:       orDuration(seconds(sa.InactiveTimeOut), defaultIdleTimeout),
		CircuitBreaker:    sa.CBEnable || sa.PDDisaggMode,
		Engine:            eng,
		Probe:             compileProbe(sa),
		ConnectionLimit:   sa.ConnectionLimit,
		AdmissionWindow:   sa.AdmissionWindow,
		MaxModelLen:       sa.MaxModelLen,
		TLS:               compileTLS(sa), // tls.go
	}
	out.Session, _ = parseSession(sa.SessionHeaderName) // validated
	switch sa.APIKeyAuth {
	case APIKeyAuthRequired:
		out.APIKeys = spec.KeysRequired
	case APIKeyAuthDisabled:
		out.APIKeys = spec.KeysOff
	}
	out.AllowedPaths = splitAllowedPaths(sa.AllowedPaths)
	out.EngineMetricsPath = compileEngineMetricsPath(sa.EngineMetricsPath, eng) // enginemetrics.go
	// The admin paths closed are those of the engine the rule names; an
	// absent kvEngineType (vllm for everything else) closes every engine's.
	out.Admin = spec.AdminSurface{Engine: spec.Engine(sa.KVEngineType), Open: sa.AllowAdminPaths}
	if sa.PDDisaggMode {
		pd := &spec.PD{
			CacheAware:          sa.PDCacheAwareMode || sa.PDPrefillPolicy == string(spec.PolicyCacheAware),
			PrefillPolicy:       spec.Policy(sa.PDPrefillPolicy), // pdpolicy.go; "" is least_load
			DecodePolicy:        spec.Policy(sa.PDDecodePolicy),
			SessionTTL:          orDuration(seconds(sa.PDSessionTTLSec), defaultPDSessionTTL),
			CacheThreshold:      orInt(sa.PDCacheThreshold, defaultPDCacheThreshold),
			BalanceAbsThreshold: orInt(sa.PDBalanceAbsThreshold, defaultPDBalanceAbs),
			PairingStrict:       sa.PDPairingMode == PairingStrict,
		}
		if eng == spec.EngineSGLang {
			pd.BootstrapPort = uint16(orInt(sa.PDBootstrapPort, defaultPDBootstrapPort))
		}
		out.PD = pd
	}
	if sa.KVExactMode != 0 {
		out.KV = &spec.KV{
			Mode:      sa.KVExactMode,
			ZMQPort:   uint16(orInt(sa.KVZmqPort, defaultKVZmqPort)),
			BlockSize: orInt(sa.KVBlockSize, defaultKVBlockSize),
			HashAlgo:  orString(sa.KVHashAlgo, engineHashAlgos[eng][0]),
			DPRanks:   orInt(sa.KVDpRankCount, defaultKVDpRanks),
			Warmup:    seconds(sa.KVWarmupSec),
		}
	}
	if s := out.Selector; s == spec.SelCHWBL || s == spec.SelWeightedCHWBL {
		out.CHWBL = compileCHWBL(sa)
	}
	out.Endpoints = make([]spec.Endpoint, len(r.Endpoints))
	for i, ep := range r.Endpoints {
		a, _ := ParseIPLiteral(ep.EndpointIP)
		ap := netip.AddrPortFrom(a, uint16(ep.TargetPort))
		se := spec.Endpoint{
			ID:          ap.String(),
			Addr:        ap,
			Weight:      ep.Weight,
			Role:        spec.Role(ep.EPRole),
			Backup:      ep.Backup,
			Window:      ep.AdmissionWindow,
			MaxModelLen: ep.MaxModelLen,
		}
		if eng == spec.EngineVLLM {
			se.NixlPort = uint16(orInt(ep.NixlPort, ep.TargetPort))
		}
		compilePairing(&ep, &se) // pairing.go
		out.Endpoints[i] = se
	}
	compileLoxiLB(r, out)
	compileSelector(r, out) // selector.go
	return out
}

func compileCHWBL(sa *ServiceArguments) *spec.CHWBL {
	c := &spec.CHWBL{
		PrefixHashLevel: defaultCHWBLHashLevel,
		MeanLoadFactor:  orInt(sa.CHWBLMeanLoadFactor, defaultCHWBLLoadFactor),
		Replication:     orInt(sa.CHWBLReplication, defaultCHWBLReplication),
	}
	if sa.CHWBLPrefixHashLevel != nil {
		c.PrefixHashLevel = *sa.CHWBLPrefixHashLevel
	}
	if sa.CHWBLPrefixHashFlags != nil {
		c.PrefixHashFlags = *sa.CHWBLPrefixHashFlags
	}
	if sa.CHWBLEnableCacheSalt != nil {
		c.CacheSalt = *sa.CHWBLEnableCacheSalt
	}
	return c
}

func compileProbe(sa *ServiceArguments) spec.Probe {
	p := spec.Probe{
		Type:     sa.ProbeType,
		Port:     uint16(sa.ProbePort),
		Request:  sa.ProbeReq,
		Response: sa.ProbeResp,
		Timeout:  orDuration(seconds(sa.ProbeTimeout), defaultProbeTimeout),
		Retries:  orInt(sa.ProbeRetries, defaultProbeRetries),
	}
	if p.Type == "" {
		p.Type = probeNone
		if sa.Monitor {
			p.Type = probeTCP
		}
	}
	if (p.Type == probeHTTP || p.Type == probeHTTPS) && p.Request == "" {
		p.Request = defaultProbeHTTPPath
	}
	return p
}

// KeyOf returns the rule's composite key, validating only the key fields, so
// callers (DELETE by body, CLI delete -f) get the same errors as Apply.
func KeyOf(r Rule) (spec.Key, error) {
	sa := &r.ServiceArguments
	if _, ok := ParseIPLiteral(sa.ExternalIP); !ok {
		return spec.Key{}, invalidField(saPath(fieldExternalIP), "malformed-service error",
			saPath(fieldExternalIP)+" in body must be of type ip-address: \""+sa.ExternalIP+"\"")
	}
	if sa.Port < 1 || sa.Port > 65535 {
		return spec.Key{}, invalidField(saPath(fieldPort), "", saPath(fieldPort)+" in body should be between 1 and 65535")
	}
	if err := checkProtocolKnown(&r); err != nil {
		return spec.Key{}, err
	}
	if err := checkProtocolServed(&r); err != nil {
		return spec.Key{}, err
	}
	if err := checkPathMatch(&r); err != nil {
		return spec.Key{}, err
	}
	return keyOfValid(sa), nil
}

func keyOfValid(sa *ServiceArguments) spec.Key {
	vip, _ := ParseIPLiteral(sa.ExternalIP)
	return spec.Key{
		VIP:           vip,
		Port:          uint16(sa.Port),
		Protocol:      sa.Protocol,
		Block:         sa.Block,
		Host:          sa.Host,
		PathPrefix:    sa.PathPrefix,
		PathMatchMode: NormPathMatch(sa.PathMatchMode),
		ModelName:     sa.ModelName,
	}
}

// NormPathMatch canonicalises path_match_mode ("disabled" ≡ ""), the way
// keys are stored; clients comparing keys call it too.
func NormPathMatch(m string) string {
	if m == pathMatchDisabled {
		return ""
	}
	return m
}

// NormalizeKey canonicalises a key built by a caller (e.g. from DELETE path
// parameters) the way rule keys are stored.
func NormalizeKey(k spec.Key) spec.Key {
	k.VIP = k.VIP.Unmap()
	k.PathMatchMode = NormPathMatch(k.PathMatchMode)
	return k
}

// normalize returns the stored wire form of a valid rule: output-only fields
// cleared, IPv6 brackets stripped, path_match_mode canonical. Endpoints are
// copied so the stored rule shares no memory with the caller's.
func normalize(r Rule) Rule {
	r.Status = nil
	sa := &r.ServiceArguments
	sa.ExternalIP = stripBrackets(sa.ExternalIP)
	sa.PathMatchMode = NormPathMatch(sa.PathMatchMode)
	eps := make([]Endpoint, len(r.Endpoints))
	for i, ep := range r.Endpoints {
		ep.EndpointIP = stripBrackets(ep.EndpointIP)
		ep.clearOutput() // output.go
		eps[i] = ep
	}
	r.Endpoints = eps
	r.SecondaryIPs = slices.Clone(r.SecondaryIPs)
	r.AllowedSources = slices.Clone(r.AllowedSources)
	sa.CHWBLPrefixHashLevel = clonePtr(sa.CHWBLPrefixHashLevel)
	sa.CHWBLPrefixHashFlags = clonePtr(sa.CHWBLPrefixHashFlags)
	sa.CHWBLEnableCacheSalt = clonePtr(sa.CHWBLEnableCacheSalt)
	normalizeLoxiLB(&r)
	normalizeTLS(sa) // tls.go
	return r
}

// effective resolves every default into the wire form so two bodies that
// mean the same thing compare equal (pd_cache_threshold 0 ≡ 20, engine "" ≡
// vllm, ...). It is only used to decide "nothing changed" (LoxiLB's 409).
func effective(r Rule) Rule {
	r = normalize(r)
	sa := &r.ServiceArguments
	eng := engineOf(sa)
	sa.KVEngineType = string(eng)
	if sa.BackendProtocol == "" {
		sa.BackendProtocol = backendHTTP1
	}
	if sa.InactiveTimeOut == 0 {
		sa.InactiveTimeOut = int(defaultIdleTimeout / time.Second)
	}
	probe := compileProbe(sa)
	sa.ProbeType, sa.ProbeReq = probe.Type, probe.Request
	sa.ProbeTimeout, sa.ProbeRetries = int(probe.Timeout/time.Second), probe.Retries
	if sa.PDDisaggMode {
		sa.CBEnable = true
		sa.PDSessionTTLSec = orInt(sa.PDSessionTTLSec, int(defaultPDSessionTTL/time.Second))
		sa.PDCacheThreshold = orInt(sa.PDCacheThreshold, defaultPDCacheThreshold)
		sa.PDBalanceAbsThreshold = orInt(sa.PDBalanceAbsThreshold, defaultPDBalanceAbs)
		if eng == spec.EngineSGLang {
			sa.PDBootstrapPort = orInt(sa.PDBootstrapPort, defaultPDBootstrapPort)
		}
	}
	if sa.KVExactMode != 0 {
		sa.KVZmqPort = orInt(sa.KVZmqPort, defaultKVZmqPort)
		sa.KVBlockSize = orInt(sa.KVBlockSize, defaultKVBlockSize)
		sa.KVDpRankCount = orInt(sa.KVDpRankCount, defaultKVDpRanks)
		if algos, ok := engineHashAlgos[eng]; ok {
			sa.KVHashAlgo = orString(sa.KVHashAlgo, algos[0])
		}
	}
	if eng == spec.EngineVLLM {
		for i := range r.Endpoints {
			r.Endpoints[i].NixlPort = orInt(r.Endpoints[i].NixlPort, r.Endpoints[i].TargetPort)
		}
	}
	effectiveLoxiLB(&r)
	return r
}

func seconds(n int) time.Duration { return time.Duration(n) * time.Second }

func orDuration(v, def time.Duration) time.Duration {
	if v == 0 {
		return def
	}
	return v
}

func orInt(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

func orString(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
