package api

import "github.com/infergate/infergate/spec"

// healthUnprobed is the health (GET) and /status state of an endpoint that
// no probe watches: the datapath counts it up until a request fails, so
// "active" would claim a check nobody made. LoxiLB's own `state` word stays
// "active" (it does take new requests), so LoxiLB's scripts read the same.
const healthUnprobed = "unprobed"

// probeNone is the compiled probe type of a rule without probes.
const probeNone = "none"

// unprobed reports whether endpoint i of r has no active probe: neither the
// rule's (probetype none, no monitor) nor an endpoint override.
func unprobed(r *spec.Rule, i int) bool {
	if r == nil || i >= len(r.Endpoints) {
		return false
	}
	p := r.Probe
	if r.Endpoints[i].Probe != nil {
		p = *r.Endpoints[i].Probe
	}
	return p.Type == "" || p.Type == probeNone
}

// unprobedState turns the datapath's "active" into "unprobed" for an
// endpoint nothing probes; every other state (down, draining, breaker-open)
// is a fact the datapath observed and is kept.
func unprobedState(state string, isUnprobed bool) string {
	if isUnprobed && state == loxiStateActive {
		return healthUnprobed
	}
	return state
}

// markUnprobed applies unprobedState to /status's endpoints (keyed by ID).
func markUnprobed(v StatusView, r *spec.Rule) {
	if r == nil {
		return
	}
	for i, ep := range r.Endpoints {
		if es, ok := v.Endpoints[ep.ID]; ok {
			es.State = unprobedState(es.State, unprobed(r, i))
			v.Endpoints[ep.ID] = es
		}
	}
}
