package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/infergate/infergate/rules"
)

// healthUnprobed is the server's health word for an endpoint no probe
// watches (api/unprobed.go).
const healthUnprobed = "unprobed"

// stateCell is the STATE column: LoxiLB's word, except that an endpoint no
// probe watches reads "unprobed" — "active" there only means no request has
// failed yet.
func stateCell(ep rules.Endpoint) string {
	if ep.Health == healthUnprobed {
		return healthUnprobed
	}
	return dash(ep.State)
}

// hintUnprobed tells the operator which rules have no health probe and how
// to add one. It prints nothing when every endpoint is probed.
func hintUnprobed(w io.Writer, rs []rules.Rule) {
	var refs []string
	for _, r := range rs {
		for _, ep := range r.Endpoints {
			if ep.Health == healthUnprobed {
				refs = append(refs, ruleRef(r))
				break
			}
		}
	}
	if len(refs) == 0 {
		return
	}
	verb := "have"
	if len(refs) == 1 {
		verb = "has"
	}
	fmt.Fprintf(w, "hint: %s %s no health probe: endpoints read unprobed, and a dead engine is only noticed when requests to it fail. "+
		"Add one with create lb … --probetype=http --probereq=/health (or --monitor for a TCP check).\n",
		strings.Join(refs, ", "), verb)
}
