package datapath

import (
	"net/http"

	"github.com/infergate/infergate/datapath/ladder"
	"github.com/infergate/infergate/datapath/pd"
	"github.com/infergate/infergate/spec"
)

// reasonDecodeUnreachable is the role-0 fallback taken after the pair was
// chosen: every decode's connection failed before it got the request.
const reasonDecodeUnreachable = "decode_unreachable"

// unsplitPossible reports whether a role-0 endpoint could serve a request
// of this rule whole right now: the dialect may then hand back a request
// whose decodes were all unreachable (pd.Pair.Unsplit).
func (c *compiled) unsplitPossible() bool {
	return c.pd != nil && c.pd.hasRole0 && c.anyUsable(c.roleMask(spec.RoleAny))
}

// serveDecodeUnreachable answers a P/D request the dialect handed back
// (pd.Outcome.DecodeUnreachable): the legs feed the breakers (the dead
// decode keeps counting towards open), then a role-0 endpoint serves the
// request unsplit, as when no pair is usable at all. LoxiLB answers the
// first requests after a decode dies with 503 until its breaker opens;
// nothing reached an engine's decode, so serving them whole is safe.
func (rt *Runtime) serveDecodeUnreachable(x *exchange, c *compiled, body []byte, o *pd.Outcome, pi, di int) {
	rt.feedLegs(c, o, pi, di)
	x.wroteHeader = false // the dialect wrote nothing
	role0 := c.roleMask(spec.RoleAny)
	if !c.anyUsable(role0) {
		rt.pdm.LadderDecisions.WithLabelValues(c.label, ladder.TierFallback, outcomeMiss, reasonNoRole0).Inc()
		rt.fail(x, c, -1, http.StatusServiceUnavailable, CodePoolUnavailable, "decode endpoint unreachable and no usable role-0 endpoint")
		return
	}
	rt.pdm.FallbackToNormal.WithLabelValues(c.label).Inc()
	rt.pdm.LadderDecisions.WithLabelValues(c.label, ladder.TierFallback, outcomeHit, reasonDecodeUnreachable).Inc()
	if body, ok := rt.stripClientTransferState(x, c, body); ok {
		rt.serveSingleExcl(x, c, body, role0, singleSend{})
	}
}
