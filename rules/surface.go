package rules

import (
	"fmt"
	"strings"

	"github.com/infergate/infergate/apierror"
)

// Bounds of allowed_paths: a short list of API paths.
const (
	maxAllowedPaths   = 64
	maxAllowedPathLen = 256
)

// checkAllowedPaths validates allowed_paths: each entry an absolute path
// without dot segments, query or wildcard other than a final "/*".
func checkAllowedPaths(r *Rule) *apierror.Error {
	ap := splitAllowedPaths(r.ServiceArguments.AllowedPaths)
	if len(ap) > maxAllowedPaths {
		msg := fmt.Sprintf("allowed_paths has %d entries; at most %d", len(ap), maxAllowedPaths)
		return invalidField(saPath(fieldAllowedPaths), msg, msg)
	}
	for i, p := range ap {
		if why := badAllowedPath(p); why != "" {
			msg := fmt.Sprintf("allowed_paths entry %d %q %s", i+1, p, why)
			return invalidField(saPath(fieldAllowedPaths), msg, msg)
		}
	}
	return nil
}

// badAllowedPath says what is wrong with one allowed_paths entry, "" if
// nothing.
func badAllowedPath(p string) string {
	base, _ := strings.CutSuffix(p, "/*")
	switch {
	case p == "" || p[0] != '/':
		return "must start with /"
	case len(p) > maxAllowedPathLen:
		return fmt.Sprintf("is longer than %d bytes", maxAllowedPathLen)
	case strings.ContainsAny(base, "*?#% \t"):
		return "may only end in /* (no other wildcard, query, escape or space)"
	}
	for _, seg := range strings.Split(base, "/") {
		if seg == "." || seg == ".." {
			return "must not hold dot segments"
		}
	}
	return ""
}

// splitAllowedPaths splits the comma-separated allowed_paths; nil for "".
func splitAllowedPaths(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	var out []string
	for _, p := range strings.Split(s, ",") {
		out = append(out, strings.TrimSpace(p))
	}
	return out
}
