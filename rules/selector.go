package rules

import (
	"strings"

	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/spec"
)

// A rule may take its endpoints from engine self-registrations
// (an infergate extension). The rule is validated and compiled as usual
// with no endpoints; rules/selector fills them in from the registry before
// each install, refusing registrations the rule cannot use.

// EndpointSelector picks the engines registered under
// <prefix>/engines/ that serve model (and, when given, engine).
type EndpointSelector struct {
	// Prefix is the registry's etcd prefix; empty = the store's prefix.
	Prefix string `json:"prefix,omitempty" yaml:"prefix,omitempty"`
	// Model must equal the registration's model.
	Model string `json:"model" yaml:"model"`
	// Engine, when set, must equal the rule's kvEngineType (vllm default).
	Engine string `json:"engine,omitempty" yaml:"engine,omitempty"`
}

// Field names of the selector, for error paths.
const (
	fieldEndpointSelector = "endpointSelector"
	selectorMaxPrefix     = 256
)

func checkEndpointSelector(r *Rule) *apierror.Error {
	es := r.EndpointSelector
	if es == nil {
		return nil
	}
	path := func(f string) string { return fieldEndpointSelector + "." + f }
	if len(r.Endpoints) > 0 {
		msg := "endpointSelector takes the endpoints from engine registrations: leave endpoints empty"
		return invalidCombo(fieldEndpoints, msg, msg)
	}
	if strings.TrimSpace(es.Model) == "" {
		return invalidField(path("model"), path("model")+" in body is required",
			"endpointSelector.model is required: registrations are matched on the model they serve")
	}
	if es.Prefix != "" && (!strings.HasPrefix(es.Prefix, "/") || len(es.Prefix) > selectorMaxPrefix ||
		strings.ContainsAny(es.Prefix, " \t\n")) {
		msg := "endpointSelector.prefix must be an etcd key prefix starting with / (at most 256 characters, no spaces)"
		return invalidField(path("prefix"), msg, msg)
	}
	eng := engineOf(&r.ServiceArguments)
	if es.Engine != "" && spec.Engine(es.Engine) != eng {
		msg := "endpointSelector.engine " + es.Engine + " differs from the rule's kvEngineType " + string(eng) +
			" (a registration of another engine could never be used)"
		return invalidCombo(path("engine"), msg, msg)
	}
	if eng == spec.EngineLlamaCpp {
		msg := "endpointSelector: llama.cpp engines do not register (llama.cpp P/D is not served)"
		return unsupported(path("engine"), msg)
	}
	return nil
}

func compileSelector(r *Rule, out *spec.Rule) {
	if es := r.EndpointSelector; es != nil {
		out.EndpointSelector = &spec.EndpointSelector{Prefix: strings.TrimRight(es.Prefix, "/"), Model: es.Model, Engine: string(engineOf(&r.ServiceArguments))}
	}
}
