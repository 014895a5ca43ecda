package datapath

import (
	"net/http"
	"net/url"
	"path"
	"strings"
	"testing"
)

// FuzzCheckPathShape: whatever request target a client sends, a path that
// passes the check means the same thing before and after normalisation
// (path.Clean changes at most duplicate or trailing slashes), and its raw
// form carries no encoded separator. So the allowlist and rule match, which
// read the decoded path, see what the engine will route.
func FuzzCheckPathShape(f *testing.F) {
	for _, s := range []string{
		"/v1/models", "/v1/models/../../admin", "/v1/models/%2e%2e/admin", "/v1/models/..%2fadmin",
		"/v1/models%2Fx", "/v1//models/", "/./v1", "/v1/models/a..b", "/%5c", "/v1/models/%00",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, target string) {
		u, err := url.ParseRequestURI(target)
		if err != nil || !strings.HasPrefix(u.Path, "/") {
			return // net/http answers 400 itself
		}
		code, _ := checkPathShape(&http.Request{URL: u})
		if code != "" {
			return
		}
		collapse := func(p string) string {
			for strings.Contains(p, "//") {
				p = strings.ReplaceAll(p, "//", "/")
			}
			if len(p) > 1 {
				p = strings.TrimSuffix(p, "/")
			}
			return p
		}
		if c := path.Clean(u.Path); c != collapse(u.Path) {
			t.Fatalf("accepted %q: decoded path %q normalises to %q", target, u.Path, c)
		}
		if raw := strings.ToLower(u.EscapedPath()); strings.Contains(raw, "%2f") || strings.Contains(raw, "%5c") {
			t.Fatalf("accepted %q with an encoded separator", target)
		}
	})
}
