package datapath

import (
	"net/http"

	"github.com/infergate/infergate/datapath/pd"
)

// refuseMoRIIOUnsplit answers 501 moriio_route_unsupported, before anything
// is sent, for a generation API a vLLM rule with a MoRI-IO endpoint would
// otherwise send to one decode without a sequence (/v1/messages): nothing
// reaches a MoRI-IO decode without its checked handoff, and SMG refuses
// every route but completions and chat on MoRI-IO the same way. Side paths
// (tokenize, models, …) generate nothing and are not refused. It reports
// whether the client was answered.
func (rt *Runtime) refuseMoRIIOUnsplit(x *exchange, c *compiled, route pdRoute) bool {
	if route.reason != reasonNoTransfer || !c.pd.moriio {
		return false
	}
	rt.fail(x, c, -1, http.StatusNotImplemented, pd.CodeMoRIIORouteUnsupported, pd.MoRIIORouteMessage(x.r.URL.Path))
	return true
}
