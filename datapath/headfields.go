package datapath

import (
	"net/http"

	"github.com/infergate/infergate/datapath/h1"
	"github.com/infergate/infergate/datapath/upstream"
)

// takesFields reports whether x's answer may be relayed with the
// engine's fields as pairs (upstream.Leg.Fields): x.w is the timing
// wrapper itself, over a writer that takes them (respclock.FieldsWriter,
// h1's). Any other writer in between (a tenant's usage writer, a P/D
// dialect's) sees the header map only.
func takesFields(x *exchange) bool {
	return x.w == http.ResponseWriter(&x.obs.clock) && x.obs.clock.TakesFields()
}

// pairsFit reads the pairs of a relayed head for relayAnswer: the first
// Content-Type (the relay's SSE test), and whether the pairs may go to
// the writer as they are (false: a field the datapath reads back from
// the client's header map, the gateway error code X-Infergate-Error that
// observeEnd takes from the answer, is among them; the pairs then go into
// the map, as they came before).
func pairsFit(kv []string) (contentType string, fit bool) {
	seenType := false
	for i := 0; i+1 < len(kv); i += 2 {
		switch kv[i] {
		case headerContentType:
			if !seenType {
				contentType, seenType = kv[i+1], true
			}
		case HeaderError:
			return "", false
		}
	}
	return contentType, true
}

// pairsIntoMap adds the pairs kv to h, each name's values in their order:
// the map relayAnswer would have had had the engine's head been parsed
// into it.
func pairsIntoMap(h http.Header, kv []string) {
	for i := 0; i+1 < len(kv); i += 2 {
		h[kv[i]] = append(h[kv[i]], kv[i+1])
	}
}

// outboundList is the engine's request head as a list (upstream.Leg.List)
// for a single-pool request from client (the X-Forwarded-For address), or
// the zero list: serveSingleExcl then prepares r.Header and upstream
// ranges over it. A list only when it says what the prepared r.Header
// would say: the front end's parse vouched for the fields (h1's HeadList:
// each name once, so the request id was not trimmed) and for their lack
// of hop-by-hop ones (hopFree: nothing to strip), and since the parse the
// handler set nothing in r.Header: no hook edited it, and the rule has no
// API keys (their field is stripped). The request id and X-Forwarded-For
// are in the list alone, not inserted into r.Header (a map insert each per
// request; idIntoHeader puts a minted id there when no list goes); a
// Sender that drops the list puts both back (upstream.HeadList.SetInto).
func (rt *Runtime) outboundList(x *exchange, c *compiled, hopFree bool, client string) upstream.HeadList {
	if !hopFree || client == "" || c.keys || rt.hookServe != nil {
		return upstream.HeadList{}
	}
	names, codes, values, ok := h1.HeadList(x.obs.clock.Unwrap())
	if !ok {
		return upstream.HeadList{}
	}
	return upstream.HeadList{Names: names, Codes: codes, Values: values, RequestID: x.requestID,
		ForwardedFor: forwardedFor(x.r.Header, client, rt.opts.TrustForwardedFor)}
}
