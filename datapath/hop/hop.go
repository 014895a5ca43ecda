// Package hop removes the connection-scoped ("hop-by-hop") fields of an
// HTTP header, the one rule every leg of the proxy applies in both
// directions: client → engine and engine → client.
package hop

import (
	"net/http"
	"strings"
)

// Headers are connection-scoped and never forwarded (RFC 9110 §7.6.1, plus
// the de-facto Proxy-Connection and Keep-Alive, and Expect, which the
// gateway answers itself).
var Headers = [...]string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Expect",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// Strip deletes from h the standard hop-by-hop fields and every field the
// sender named in its Connection header. A name in Connection is removed
// even when it is normally end-to-end: the sender declared it hop-scoped
// (an engine's "Connection: keep-alive, X-Secret-Hop" must not leak
// X-Secret-Hop to clients).
func Strip(h http.Header) {
	for _, v := range h["Connection"] {
		for f := range strings.SplitSeq(v, ",") {
			// The usual tokens name nothing beyond the standard set, which
			// is deleted below anyway: skip them without canonicalising.
			if f = strings.TrimSpace(f); f != "" && !strings.EqualFold(f, "keep-alive") && !strings.EqualFold(f, "close") {
				h.Del(f)
			}
		}
	}
	if len(h) >= len(Headers) {
		for _, k := range Headers {
			delete(h, k)
		}
		return
	}
	// The usual header holds fewer fields than the set: visiting them is
	// cheaper than ten deletes of absent keys (deleting while ranging over
	// a map is allowed).
	for k := range h {
		if IsHeader(k) {
			delete(h, k)
		}
	}
}

// IsHeader reports whether the canonical name k is one of Headers. Strip
// asks it of each field; the front ends' parsers ask it of each name they
// store, so that a header holding none (nor a Connection naming others)
// skips Strip.
func IsHeader(k string) bool {
	switch k {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Expect",
		"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// HasToken reports whether a comma-separated header (Connection, for one)
// holds tok, compared case-insensitively.
func HasToken(vv []string, tok string) bool {
	for _, v := range vv {
		for f := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(f), tok) {
				return true
			}
		}
	}
	return false
}
