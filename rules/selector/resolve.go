package selector

import (
	"fmt"
	"maps"
	"net/netip"
	"sort"

	"github.com/infergate/infergate/rules/store/etcdstore"
	"github.com/infergate/infergate/spec"
)

// MaxEndpoints is a rule's endpoint cap (the wire limit of a static rule).
const MaxEndpoints = 32

// Refusal reason classes (the metric's reason label).
const (
	ReasonInvalid = "invalid" // the registration fails its own validation
	ReasonEngine  = "engine"  // another engine than the rule's kvEngineType
	ReasonRole    = "role"    // a role the rule cannot use
	ReasonKV      = "kv"      // kvZmqPort, block_size or dp_ranks contradicting the rule's KV settings
	ReasonLimit   = "limit"   // beyond MaxEndpoints
)

// Refusal is why one registration cannot serve one rule.
type Refusal struct {
	Class  string // one of the Reason… constants
	Reason string // names the field and both values
}

// Pair facts, keys of spec.Endpoint.PairFacts.
const (
	FactBlockSize   = spec.FactBlockSize
	FactKVConnector = spec.FactKVConnector
)

// Resolve returns a copy of r whose Endpoints are the registrations that
// match r's selector (same model) and that r can use, in key order, and the
// refusals of the matching ones it cannot use, by registration key.
func Resolve(r *spec.Rule, regs []etcdstore.EngineEntry) (*spec.Rule, map[string]Refusal) {
	out := *r
	out.Endpoints = nil
	refused := map[string]Refusal{}
	sorted := append([]etcdstore.EngineEntry(nil), regs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Key < sorted[j].Key })
	for _, e := range sorted {
		if e.Registration.Model != r.EndpointSelector.Model {
			continue // not for this rule (an undecodable value has no model either)
		}
		ep, ref := endpointFor(r, e)
		if ref != nil {
			refused[e.Key] = *ref
			continue
		}
		if len(out.Endpoints) == MaxEndpoints {
			refused[e.Key] = Refusal{ReasonLimit, fmt.Sprintf("the rule already has %d endpoints (the limit)", MaxEndpoints)}
			continue
		}
		out.Endpoints = append(out.Endpoints, ep)
	}
	return &out, refused
}

// endpointFor checks one registration against r the way r's validation
// checks a static endpoint, and builds its endpoint.
func endpointFor(r *spec.Rule, e etcdstore.EngineEntry) (spec.Endpoint, *Refusal) {
	g := e.Registration
	refuse := func(class, format string, a ...any) (spec.Endpoint, *Refusal) {
		return spec.Endpoint{}, &Refusal{class, fmt.Sprintf(format, a...)}
	}
	if e.Refused != "" {
		return refuse(ReasonInvalid, "%s", e.Refused)
	}
	if spec.Engine(g.Engine) != r.Engine {
		return refuse(ReasonEngine, "engine: registered as %s but the rule's kvEngineType is %s", g.Engine, r.Engine)
	}
	role := g.SpecRole()
	if r.PD == nil && role != spec.RoleAny {
		return refuse(ReasonRole, "role: a %s engine cannot serve a rule without pd_disagg_mode (only role any)", g.Role)
	}
	if k := r.KV; k != nil {
		switch {
		case g.KVZmqPort != 0 && g.KVZmqPort != int(k.ZMQPort):
			return refuse(ReasonKV, "kvZmqPort: %d differs from the rule's kvZmqPort %d (KV events are read from the rule's port)", g.KVZmqPort, k.ZMQPort)
		case g.BlockSize != 0 && g.BlockSize != k.BlockSize:
			return refuse(ReasonKV, "block_size: %d differs from the rule's kvBlockSize %d (block hashes would never match)", g.BlockSize, k.BlockSize)
		case g.DPRanks != 0 && g.DPRanks != k.DPRanks:
			return refuse(ReasonKV, "dp_ranks: %d differs from the rule's kvDpRankCount %d", g.DPRanks, k.DPRanks)
		}
	}
	addr, err := netip.ParseAddrPort(e.Key)
	if err != nil { // Engines already refused a key that is not the url's
		return refuse(ReasonInvalid, "key %q is not ip:port", e.Key)
	}
	ep := spec.Endpoint{ID: addr.String(), Addr: addr, Weight: 1, Role: role}
	if r.Engine == spec.EngineVLLM {
		ep.NixlPort = addr.Port()
		if g.NixlPort != 0 {
			ep.NixlPort = uint16(g.NixlPort)
		}
	}
	ep.PairFacts = g.PairFacts()
	if role == spec.RolePrefill {
		// As a static endpoint's: the prefill's own bootstrap server (an
		// SGLang prefill's decodes join it there; 0 would mean the rule's
		// pdBootstrapPort), Validate has refused it where none runs.
		ep.BootstrapPort = uint16(g.BootstrapPort)
	}
	if len(g.Labels) > 0 {
		ep.Labels = maps.Clone(g.Labels)
	}
	return ep, nil
}

// sameEndpoints reports whether two resolutions would serve identically.
func sameEndpoints(a, b []spec.Endpoint) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.ID != y.ID || x.Role != y.Role || x.NixlPort != y.NixlPort || x.Weight != y.Weight || x.BootstrapPort != y.BootstrapPort ||
			!maps.Equal(x.PairFacts, y.PairFacts) || !maps.Equal(x.Labels, y.Labels) {
			return false
		}
	}
	return true
}

func sameRefusals(a, b map[string]Refusal) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
