package datapath

import (
	"net/http"

	"github.com/infergate/infergate/internal/swar"
)

// Request-line codes (400): an HTTP/2 request's :method and :path are
// free-form header values, and the engine leg writes them into an HTTP/1.1
// request line, so they are held to what that line can carry.
const (
	CodeInvalidMethod = "invalid_method"         // not an RFC 9110 token
	CodeInvalidTarget = "invalid_request_target" // whitespace or a control byte
)

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
	// A path without a control byte, backslash or dot has nothing the loop
	// below refuses: it is seen a word at a time (swar.go), and the loop
	// skipped.
	n := len(p)
	if !pathMayRefuse(p) {
		n = 0
	}
	for i := 0; i < n; i++ {
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

// checkRequestLine refuses a method that is not an RFC 9110 token and a
// request target holding whitespace or a control byte, before anything
// routes on either. HTTP/1.1 parsing already refuses both; HTTP/2 hands
// :method and :path over as sent, and the engine leg would write them into
// its request line verbatim: a :method "GET /sleep?" or a :path with a
// space would make the engine read another request line than the one the
// gateway matched (and checked against allowed_paths and the admin paths).
// It returns the error code and message, or "" when the line is sound.
func checkRequestLine(r *http.Request) (code, msg string) {
	m := r.Method
	if m == "" {
		return CodeInvalidMethod, "the request method is empty"
	}
	for i := 0; i < len(m); i++ {
		if !isTokenChar(m[i]) {
			return CodeInvalidMethod, "the request method is not an HTTP token (RFC 9110 §5.6.2)"
		}
	}
	if !targetPlain(r.RequestURI) {
		return CodeInvalidTarget, "the request target contains whitespace or a control character"
	}
	return "", ""
}

// targetPlain reports whether t holds no byte ≤ ' ' and no DEL (h1's
// parser refuses a target by the same function).
func targetPlain(t string) bool { return swar.Plain(t) }

// pathMayRefuse reports whether p holds a byte checkPathShape's loop
// looks at: a control byte, DEL, a backslash or a dot.
func pathMayRefuse(p string) bool {
	if len(p) >= 8 {
		flagged := func(x uint64) bool {
			return swar.ByteBelow(x, 0x20) || swar.ByteIs(x, 0x7f) || swar.ByteIs(x, '\\') || swar.ByteIs(x, '.')
		}
		for i := 0; i+8 < len(p); i += 8 {
			if flagged(swar.Word8(p[i : i+8])) {
				return true
			}
		}
		return flagged(swar.Word8(p[len(p)-8:]))
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c < 0x20 || c == 0x7f || c == '\\' || c == '.' {
			return true
		}
	}
	return false
}

// isTokenChar reports an RFC 9110 tchar: "!#$%&'*+-.^_`|~", digits, letters.
func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
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
