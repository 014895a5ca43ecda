package api

import (
	"strconv"

	"github.com/infergate/infergate/rules"
	"github.com/infergate/infergate/spec"
)

// GET reads like LoxiLB's: LoxiLB's scripts and loxicmd parse
// these values, so they follow LoxiLB's vocabulary, and infergate's finer
// facts go to fields of their own.

// LoxiLB's endpoint state words; its scripts wait for "inact".
const (
	loxiStateActive   = "active"
	loxiStateInactive = "inactive"
	healthBreakerOpen = "breaker-open"
	breakerOpenName   = "open"
	backendHTTP1      = "http1"
)

// fillEndpointState sets LoxiLB's state (active only when the endpoint takes
// new requests), the finer health, and counter "requests:bytes" — LoxiLB
// counts packets:bytes at L4; an L7 proxy's unit is the request.
func fillEndpointState(ep *rules.Endpoint, es spec.EndpointStatus, adminDown bool) {
	health := es.State
	if es.Breaker == breakerOpenName && health == loxiStateActive {
		health = healthBreakerOpen
	}
	ep.Health = health
	ep.State = loxiStateInactive
	if health == loxiStateActive && !adminDown {
		ep.State = loxiStateActive
	}
	ep.Counter = strconv.FormatUint(es.Requests, 10) + ":" + strconv.FormatUint(es.Bytes, 10)
	ep.EngineLoad = es.Engine.Summary()
	ep.WindowLoad = es.Window.Summary()
}

// loxilbView fills what LoxiLB's GET always shows: adminStateUp, the
// effective inactiveTimeOut, backend_protocol for fullproxy rules, and
// endpoints in LoxiLB's order (by IP, then port).
func loxilbView(r *rules.Rule) {
	sa := &r.ServiceArguments
	up := rules.AdminUp(sa)
	sa.AdminStateUp = &up
	sa.InactiveTimeOut = rules.EffectiveInactiveTimeOut(sa)
	if sa.BackendProtocol == "" {
		sa.BackendProtocol = backendHTTP1
	}
	rules.SortEndpointsLoxiLB(r.Endpoints)
}
