package pd

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
)

// Request shapes one P/D handoff cannot serve: the transfer moves the KV of
// one prompt to one consumer, so several samples (n > 1, best_of > 1, beam
// search) or several prompts (a batched prompt list) per request need each
// engine's own answer (see Dialect implementations and docs/datapath.md).

// Wire names of the shape fields and the Responses API fields the
// rewriters touch.
const (
	fieldBestOf          = "best_of"
	fieldUseBeamSearch   = "use_beam_search"
	fieldPrompt          = "prompt"
	fieldMaxOutputTokens = "max_output_tokens"
	fieldStore           = "store"
	fieldBackground      = "background"
)

// Shape reasons (the reason label of infergate_pd_unsplit_requests_total
// when vLLM's decode computes the prompt itself).
const (
	ShapeN          = "n_gt_1"
	ShapeBestOf     = "best_of_gt_1"
	ShapeBeamSearch = "beam_search"
	ShapePromptList = "prompt_list"
)

// Client-visible codes of shape errors.
const (
	CodeInvalidN         = "pd_invalid_n"         // 400: n is not a positive integer
	CodeShapeUnsupported = "pd_shape_unsupported" // 400: the engine's P/D cannot serve this shape
)

// checkN validates n: absent, null or a positive JSON integer.
func checkN(o *object) error {
	v, ok := o.lookup(fieldN)
	if !ok || string(v) == "null" {
		return nil
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || n < 1 {
		return errors.New("n must be a positive integer, got " + truncate(string(v), 32))
	}
	return nil
}

// multiShape names the first shape of the request the P/D handoff cannot
// serve as one single-consumer transfer, "" when it is a plain request.
func multiShape(o *object, path string) string {
	if v, ok := o.lookup(fieldN); ok && positiveOver1(v) {
		return ShapeN
	}
	if v, ok := o.lookup(fieldBestOf); ok && positiveOver1(v) {
		return ShapeBestOf
	}
	if o.isTrue(fieldUseBeamSearch) {
		return ShapeBeamSearch
	}
	if isCompletions(path) {
		if v, ok := o.lookup(fieldPrompt); ok && isPromptList(v) {
			return ShapePromptList
		}
	}
	return ""
}

// positiveOver1 reports whether a JSON value is an integer above 1.
func positiveOver1(v []byte) bool {
	n, err := strconv.ParseInt(string(v), 10, 64)
	return err == nil && n > 1
}

// isPromptList reports whether a completions prompt is a batch: an array of
// more than one string or token array (an array of integers is one
// tokenised prompt).
func isPromptList(v []byte) bool {
	a, err := parseArray(v)
	if err != nil || len(a) < 2 {
		return false
	}
	first := a[0]
	return len(first) > 0 && (first[0] == '"' || first[0] == '[')
}

// parseArray splits a JSON array into its raw elements.
func parseArray(v []byte) ([][]byte, error) {
	i := skipWS(v, 0)
	if i >= len(v) || v[i] != '[' {
		return nil, errInvalidJSON
	}
	i = skipWS(v, i+1)
	var out [][]byte
	if i < len(v) && v[i] == ']' {
		return out, nil
	}
	for {
		end, ok := scanValue(v, i, 1)
		if !ok {
			return nil, errInvalidJSON
		}
		out = append(out, v[i:end])
		i = skipWS(v, end)
		if i >= len(v) {
			return nil, errInvalidJSON
		}
		switch v[i] {
		case ',':
			i = skipWS(v, i+1)
		case ']':
			return out, nil
		default:
			return nil, errInvalidJSON
		}
	}
}

// refuseShape answers a shape the engine's P/D cannot serve.
func (q *seq) refuseShape(engine, shape string) {
	q.fail(PhasePrefill, http.StatusBadRequest, CodeShapeUnsupported,
		engine+" prefill/decode serves one sample of one prompt per request ("+shape+
			"): send separate requests, or use a single-pool rule")
}

// isCompletions reports whether path is the legacy completions API.
func isCompletions(path string) bool {
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	return strings.HasSuffix(path, "/v1/completions") && !strings.HasSuffix(path, "/chat/completions")
}

// isResponses reports whether path is the Responses API.
func isResponses(path string) bool {
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	return strings.HasSuffix(path, "/v1/responses")
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
