package datapath

import (
	"net/http"
	"strings"
)

// OpenAI-compatible paths the gateway serves. Anything else is answered
// 404 unknown_path without touching an engine, so scanners and typos never
// reach the fleet. Add a path here to serve it.
const (
	pathCompletions     = "/v1/completions"
	pathChatCompletions = "/v1/chat/completions"
	pathModels          = "/v1/models"
)

// checkAPI validates method and path. It returns 0 when the request may be
// routed, else the status, code, message and (for 405) the Allow value.
func checkAPI(method, path string) (status int, code, msg, allow string) {
	want := ""
	switch {
	case path == pathCompletions || path == pathChatCompletions:
		want = http.MethodPost
	case path == pathModels || strings.HasPrefix(path, pathModels+"/"):
		want = http.MethodGet
	default:
		return http.StatusNotFound, CodeUnknownPath, "unknown path " + path + "; served: POST " +
			pathCompletions + ", POST " + pathChatCompletions + ", GET " + pathModels, ""
	}
	if method != want {
		return http.StatusMethodNotAllowed, CodeMethodNotAllowed,
			"method " + method + " not allowed on " + path + "; use " + want, want
	}
	return 0, "", "", ""
}
