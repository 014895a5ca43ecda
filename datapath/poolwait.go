package datapath

import (
	"errors"
	"net/http"

	"github.com/infergate/infergate/datapath/upstream"
)

// CodeUpstreamPoolTimeout (504): every connection to the chosen engine
// stayed busy (at --max-engine-conns-per-endpoint) until too little of the
// first-byte timeout was left for the engine, so the request was never sent.
const CodeUpstreamPoolTimeout = "upstream_pool_timeout"

// poolWaitFailed answers a request that gave up waiting for a connection to
// its engine until its first-byte timeout (a timed-out
// upstream.PoolWaitError) and reports whether err was one.
//
// Why apart from sendFailed: nothing reached the engine, so the request is
// not counted as sent and the breaker is not fed (a full pool is the
// gateway's own bound, not an engine failure); and the client learns which
// bound it met. The wait ends while the engine's share of the first-byte
// timeout is still left (the Sender counts HeaderWait from before the
// wait), so a saturated engine answers 504 no later than a silent one.
func (rt *Runtime) poolWaitFailed(x *exchange, c *compiled, i int, err error) bool {
	var pw *upstream.PoolWaitError
	if !errors.As(err, &pw) || !pw.TimedOut {
		return false // a wait cut by the context: sendFailed's cases
	}
	if x.r.Context().Err() != nil {
		c.countRequest(i, statusClientClosed, codeClientClosed)
		return true
	}
	rt.fail(x, c, i, http.StatusGatewayTimeout, CodeUpstreamPoolTimeout,
		"every connection to the engine stayed busy for the first-byte timeout; the request was not sent")
	return true
}
