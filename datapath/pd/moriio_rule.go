package pd

import (
	"strings"

	"github.com/infergate/infergate/spec"
)

// HasMoRIIOEndpoint reports whether any endpoint of r declares
// MoRIIOConnector. Such a rule never sends a generation request to one
// endpoint without the MoRI-IO sequence (its decode is only ever sent a
// checked handoff), and answers SMG's codes where SMG has them.
func HasMoRIIOEndpoint(r *spec.Rule) bool {
	if r == nil {
		return false
	}
	for _, ep := range r.Endpoints {
		if strings.EqualFold(connectorName(ep), connectorMoRIIO) {
			return true
		}
	}
	return false
}
