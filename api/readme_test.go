package api_test

import (
	"os"
	"strings"
	"testing"

	"github.com/infergate/infergate/api"
)

// readmeExempt are routes the README's API table deliberately does not
// list, each with the reason.
var readmeExempt = map[string]string{
	"GET /netlox/v1/docs/*file": "Swagger UI static assets",
}

// TestReadmeListsEveryRoute: the README's API table names every route the
// server serves ("`METHOD path`", paths relative to the base path), so a
// new route cannot ship undocumented and the table cannot go stale.
func TestReadmeListsEveryRoute(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	h := newHarness(t, true, nil)
	for _, r := range h.routes(t) {
		if _, ok := readmeExempt[r]; ok {
			continue
		}
		method, path, _ := strings.Cut(r, " ")
		rel := strings.TrimPrefix(path, api.BasePath)
		if !strings.Contains(readme, "`"+method+" "+rel+"`") {
			t.Errorf("README.md's API table lacks `%s %s`", method, rel)
		}
	}
}
