package rules

import "slices"

// SpecOnly is r without its output-only fields (status, and each
// endpoint's state, counter, health, engineLoad and windowLoad): the form
// in which a rule read back from the API is applied again. The endpoints
// are copied, so r is not changed.
func SpecOnly(r Rule) Rule {
	r.Status = nil
	r.Endpoints = slices.Clone(r.Endpoints)
	for i := range r.Endpoints {
		r.Endpoints[i].clearOutput()
	}
	return r
}

// clearOutput clears the endpoint's output-only fields (decode.go's
// outputOnly keys).
func (ep *Endpoint) clearOutput() {
	ep.State, ep.Counter, ep.Health, ep.EngineLoad, ep.WindowLoad = "", "", "", "", ""
}
