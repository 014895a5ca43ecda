package datapath

import (
	"mime"
	"net/http"
	"strings"

	"github.com/infergate/infergate/datapath/hop"
	"github.com/infergate/infergate/datapath/pd"
	"github.com/infergate/infergate/spec"
)

// The engines' HTTP surface. A single-pool rule forwards every path and
// method (the engine answers what it does not serve); a P/D rule sorts each
// request into one of the routes below (pdRouteFor), asking the engine's
// dialect which generation APIs it splits. docs/datapath.md has the table
// per path and engine.

// Paths the datapath treats specially.
const (
	pathResponses      = "/v1/responses"
	pathMessages       = "/v1/messages"
	pathCountTokens    = "/v1/messages/count_tokens"
	pathEmbeddings     = "/v1/embeddings"
	pathTokenize       = "/tokenize"
	pathDetokenize     = "/detokenize"
	pathHealth         = "/health"
	pathVersion        = "/version"
	headerUpgrade      = "Upgrade"
	contentTypeFormURL = "application/x-www-form-urlencoded"
	contentTypePlain   = "text/plain"
	CodeUpgradeRefused = "upgrade_not_supported" // 501: WebSocket / h2c upgrade requests
	CodePathNotAllowed = "path_not_allowed"      // 404: outside the rule's allowed_paths
	CodePDPathRefused  = "pd_path_unsupported"   // 404/501: a P/D rule cannot serve this path
	reasonSidePath     = "side_path"             // infergate_pd_unsplit_requests_total reasons
	reasonNoTransfer   = "no_transfer_api"       // the engine's P/D transfer does not work on this API
	reasonMethod       = "method"                // a generation path asked with a method other than POST
)

// pdRouteKind is how a P/D rule serves one request.
type pdRouteKind uint8

const (
	// pdSequence runs the engine's P/D sequence (body read, JSON object).
	pdSequence pdRouteKind = iota
	// pdOne sends the request to one endpoint of role (else any usable
	// endpoint) without a P/D sequence; the body streams through.
	pdOne
	// pdRefused answers CodePDPathRefused.
	pdRefused
)

// pdRoute is the decision for one request on a P/D rule.
type pdRoute struct {
	kind   pdRouteKind
	role   spec.Role // pdOne: the role that serves it
	reason string    // pdOne: the unsplit-counter reason
	// strict (pdOne): only role may serve (no fallback to other roles);
	// the dialect's Split says so (SGLang: a generation API it cannot split
	// goes to a role-0 endpoint or is refused).
	strict bool
}

// isGenerationPath reports whether path is an API that generates tokens.
func isGenerationPath(path string) bool {
	switch path {
	case pathCompletions, pathChatCompletions, pathResponses, pathMessages:
		return true
	}
	return false
}

// sidePathRole is the role serving a P/D rule's side paths (generate
// nothing: one endpoint, no sequence); ok false for paths the rule refuses.
// Tokenizer and token-count calls go to a prefill (as SMG does: the
// prefill tier owns prompt processing); so do the rest, which any engine of
// the pool answers alike.
func sidePathRole(path string) (spec.Role, bool) {
	switch path {
	case pathTokenize, pathDetokenize, pathCountTokens, pathEmbeddings,
		pathHealth, pathVersion, pathModels,
		"/v1/rerank", "/rerank", "/v1/score", "/score", "/pooling", "/classify", "/v1/classify":
		return spec.RolePrefill, true
	}
	if strings.HasPrefix(path, pathModels+"/") {
		return spec.RolePrefill, true
	}
	return 0, false
}

// pdRouteFor decides how a P/D rule whose engine's dialect is d serves
// method path. Which generation APIs split, and who serves the others, is
// the dialect's knowledge (pd.Dialect.Split); d nil (an engine without a
// P/D sequence) serves them on a decode.
func pdRouteFor(d pd.Dialect, method, path string) pdRoute {
	if isGenerationPath(path) {
		if method != http.MethodPost {
			// The engine answers (405, usually): relay it from one endpoint.
			return pdRoute{kind: pdOne, role: spec.RolePrefill, reason: reasonMethod}
		}
		sp := pd.Split{Role: spec.RoleDecode}
		if d != nil {
			sp = d.Split(path)
		}
		if sp.Sequence {
			return pdRoute{kind: pdSequence}
		}
		return pdRoute{kind: pdOne, role: sp.Role, reason: reasonNoTransfer, strict: sp.Strict}
	}
	if role, ok := sidePathRole(path); ok {
		return pdRoute{kind: pdOne, role: role, reason: reasonSidePath}
	}
	return pdRoute{kind: pdRefused}
}

// pdRoute decides how this P/D rule serves method path (pdRouteFor over
// the rule's dialect).
func (c *compiled) pdRoute(method, path string) pdRoute {
	return pdRouteFor(c.pd.dialect, method, path)
}

// isUpgrade reports a protocol-switch request (WebSocket /v1/realtime,
// h2c). The engine connection is request/response only, so these are
// refused with CodeUpgradeRefused rather than half-proxied.
func isUpgrade(r *http.Request) bool {
	return len(r.Header[headerUpgrade]) > 0 && hop.HasToken(r.Header[headerConnection], "upgrade")
}

// hasBody reports whether the client sends a request body.
func hasBody(r *http.Request) bool {
	return r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0
}

// routableContentType reports whether a body of this Content-Type may be
// read to route on: JSON, and the types curl and scripts send JSON with by
// accident (none, form-urlencoded, text/plain). Uploads (multipart, audio,
// octet-stream, …) are never read: they stream through.
func routableContentType(ct string) bool {
	if ct == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == contentTypeJSON || strings.HasSuffix(mt, "+json") || mt == contentTypeFormURL || mt == contentTypePlain
}

// bodyForMatch reports whether the body must be read before the rule
// match: some rule on the listener pins a model, the client did not say
// which in X-Model, and the body is JSON.
func bodyForMatch(t *routeTable, r *http.Request) bool {
	return t.needsModel && hasBody(r) && r.Header.Get(HeaderModel) == "" &&
		routableContentType(r.Header.Get(headerContentType))
}

// bodyForRule reports whether the matched rule routes on the body: a P/D
// generation request (the dialect rewrites it, whatever its type: a
// non-JSON one is then refused naming the path) or a JSON side-path body on
// P/D, or a single pool keyed on the prompt (KV-exact mode 3, CHWBL) or
// enforcing API keys, with a JSON body.
func (c *compiled) bodyForRule(r *http.Request) bool {
	if !hasBody(r) {
		return false
	}
	if c.rule.PD != nil {
		// Generation bodies run the sequence; JSON side-path bodies are read
		// too so client transfer state can be removed (servePDOne); uploads
		// stream through.
		return c.pdRoute(r.Method, r.URL.Path).kind == pdSequence ||
			routableContentType(r.Header.Get(headerContentType))
	}
	// Keyed rules read a JSON body for the key's model allow-list and the
	// token reservation. Rules with an admission window read it so that a
	// request waiting in the gateway queue notices its client leaving
	// (net/http watches the connection only once the body is read).
	routes := (c.kv != nil && c.kv.Mode() == 3) || c.keys || c.win != nil ||
		c.rule.Selector == spec.SelCHWBL || c.rule.Selector == spec.SelWeightedCHWBL
	return routes && routableContentType(r.Header.Get(headerContentType))
}

// pathAllowed applies the rule's optional allowed_paths (an infergate
// extension restoring a strict surface): empty allows every path; an entry
// ending in "/*" allows that prefix, any other entry is exact.
func pathAllowed(allowed []string, path string) bool {
	if len(allowed) == 0 {
		return true
	}
	for _, a := range allowed {
		if p, ok := strings.CutSuffix(a, "/*"); ok {
			if path == p || strings.HasPrefix(path, p+"/") {
				return true
			}
			continue
		}
		if path == a {
			return true
		}
	}
	return false
}
