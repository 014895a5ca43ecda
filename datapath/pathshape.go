package datapath

import "net/http"

// OpenAI-compatible paths the datapath knows by name. Single-pool rules
// forward every path (surface.go); these matter to P/D rules and routing.
const (
	pathCompletions     = "/v1/completions"
	pathChatCompletions = "/v1/chat/completions"
	pathModels          = "/v1/models"
)

// checkPathShape refuses paths whose meaning changes under normalisation:
// dot segments ("/v1/models/../../admin", also spelled %2e%2e), encoded
// slashes or backslashes (%2F, %5C: "..%2f" walks up on engines that decode
// before routing), backslashes and control bytes. The allowlist and the
// rule match read the decoded path, while the engine receives the raw
// target, so such a path could pass the checks as one path and be served as
// another. It returns the error code and message, or "" when the path is
// plain.
func checkPathShape(r *http.Request) (code, msg string) {
	p := r.URL.Path
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c < 0x20 || c == 0x7f || c == '\\':
			return CodeInvalidPath, "path contains a control character or backslash"
		case c == '.' && (i == 0 || p[i-1] == '/'):
			j := i + 1
			if j < len(p) && p[j] == '.' {
				j++
			}
			if j == len(p) || p[j] == '/' {
				return CodeInvalidPath, "path contains a dot segment (\".\" or \"..\", also percent-encoded); send the normalised path"
			}
		}
	}
	// RawPath is set only when the target's encoding differs from the
	// default one of Path, which is always the case for an encoded slash.
	if raw := r.URL.RawPath; raw != "" && hasEncodedSeparator(raw) {
		return CodeInvalidPath, "path contains an encoded slash or backslash (%2F, %5C)"
	}
	return "", ""
}

// hasEncodedSeparator reports whether raw holds %2F or %5C (any case).
func hasEncodedSeparator(raw string) bool {
	for i := 0; i+2 < len(raw); i++ {
		if raw[i] != '%' {
			continue
		}
		if h, l := raw[i+1], raw[i+2]|0x20; (h == '2' && l == 'f') || (h == '5' && l == 'c') {
			return true
		}
	}
	return false
}
