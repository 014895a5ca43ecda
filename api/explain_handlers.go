package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/spec"
)

// routeLBExplain answers "where would this request go, and why" for one
// rule, next to …/compiled and …/status under the rule's key.
const routeLBExplain = routeLBKey + "/explain"

// Wire names of the explain request envelope.
const (
	fieldExplainPath    = "path"
	fieldExplainHeaders = "headers"
	fieldExplainBody    = "body"
)

// DefaultExplainPath is the client path assumed when the envelope has none.
const DefaultExplainPath = "/v1/chat/completions"

// CodeNotAvailable is the explain endpoint's 501 when the daemon runs
// without a datapath that can explain (API-only tests, the no-op runtime).
const CodeNotAvailable = "not_available"

// Explainer runs a rule's routing decision for a client request without
// sending it or changing any state (no session pin, nothing learned) and
// returns a JSON-encodable explanation: which tier would pick which
// endpoint and why, match rates, scores, loads. The datapath Runtime's
// Explain satisfies it through ExplainerOf.
type Explainer interface {
	Explain(ctx context.Context, k spec.Key, path string, header http.Header, body []byte) (any, error)
}

// ExplainerFunc adapts a function to Explainer.
type ExplainerFunc func(ctx context.Context, k spec.Key, path string, header http.Header, body []byte) (any, error)

// Explain implements Explainer.
func (f ExplainerFunc) Explain(ctx context.Context, k spec.Key, path string, header http.Header, body []byte) (any, error) {
	return f(ctx, k, path, header, body)
}

// ExplainerOf adapts a typed explain method, such as
// (*datapath.Runtime).Explain returning spec.Explanation, so the API
// does not depend on the datapath's view type.
func ExplainerOf[V any](f func(ctx context.Context, k spec.Key, path string, header http.Header, body []byte) (V, error)) Explainer {
	return ExplainerFunc(func(ctx context.Context, k spec.Key, path string, header http.Header, body []byte) (any, error) {
		return f(ctx, k, path, header, body)
	})
}

// ExplainRequest is the POST …/explain body: the client request to
// explain. Body is the client's JSON body verbatim; Path and Headers are
// what the client would send (Headers carry X-Conversation-Id for Tier 0,
// X-Model, …). Without an envelope (no "body" field) the whole POST body is
// taken as the client body.
type ExplainRequest struct {
	Path    string            `json:"path,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    json.RawMessage   `json:"body"`
}

// parseExplainRequest accepts the envelope or a bare client body.
func parseExplainRequest(raw []byte) (path string, header http.Header, body []byte, err error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return "", nil, nil, apierror.BadRequest(apierror.CodeMalformedJSON, "", "malformed json",
			"explain body must be a JSON object: the client request body, or {\"path\",\"headers\",\"body\"}")
	}
	header = http.Header{}
	if _, enveloped := fields[fieldExplainBody]; !enveloped {
		return DefaultExplainPath, header, raw, nil
	}
	var req ExplainRequest
	if err := json.Unmarshal(raw, &req); err != nil {
		return "", nil, nil, apierror.BadRequest(apierror.CodeMalformedJSON, fieldOfJSONError(err), "malformed json",
			"explain envelope: "+err.Error())
	}
	path = req.Path
	if path == "" {
		path = DefaultExplainPath
	}
	if !strings.HasPrefix(path, "/") {
		return "", nil, nil, apierror.BadRequest(apierror.CodeInvalidField, fieldExplainPath, "malformed arguments",
			"path must start with /, got "+path)
	}
	for k, v := range req.Headers {
		header.Set(k, v)
	}
	body = req.Body
	if len(body) == 0 || string(body) == "null" {
		return "", nil, nil, apierror.BadRequest(apierror.CodeInvalidField, fieldExplainBody, "malformed arguments",
			"body must be the client request's JSON body")
	}
	return path, header, body, nil
}

func fieldOfJSONError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return te.Field
	}
	return ""
}

// postExplain serves POST …/explain. The rule is looked up like …/status; the
// query parameters of the composite key (block, path_prefix, model_name)
// pick one of several rules sharing VIP:port:protocol.
func (s *Server) postExplain(c *gin.Context) {
	e, ok := s.lookup(c)
	if !ok {
		return
	}
	if s.explain == nil {
		writeError(c, s.log, apierror.New(http.StatusNotImplemented, CodeNotAvailable, "", "not available",
			"this daemon's runtime cannot explain routing decisions"))
		return
	}
	if err := requireJSON(c.GetHeader(headerContentType)); err != nil {
		writeError(c, s.log, err)
		return
	}
	raw, err := io.ReadAll(c.Request.Body)
	if err != nil {
		if errBodyTooLarge(err) {
			writeError(c, s.log, bodyTooLarge(s.maxBody))
			return
		}
		writeError(c, s.log, apierror.BadRequest(apierror.CodeMalformedJSON, "", "malformed json", "read body: "+err.Error()))
		return
	}
	path, header, body, err := parseExplainRequest(raw)
	if err != nil {
		writeError(c, s.log, err)
		return
	}
	var key spec.Key
	if e.Compiled != nil {
		key = e.Compiled.Key
	}
	if hasKeyQuery(c) || e.Compiled == nil {
		if key, err = keyFromRequest(c); err != nil {
			writeError(c, s.log, err)
			return
		}
	}
	out, err := s.explain.Explain(c.Request.Context(), key, path, header, body)
	if err != nil {
		writeError(c, s.log, err)
		return
	}
	c.JSON(http.StatusOK, out)
}

// hasKeyQuery reports whether the request names more of the composite key
// than VIP:port:protocol.
func hasKeyQuery(c *gin.Context) bool {
	q := c.Request.URL.Query()
	for _, k := range []string{queryBlock, queryPathPrefix, queryPathMatchMode, queryModelName} {
		if q.Has(k) {
			return true
		}
	}
	return false
}
