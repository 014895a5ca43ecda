package datapath

import "net/http"

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
