package swagger

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestUIHandler(t *testing.T) {
	ts := httptest.NewServer(UIHandler("/netlox/v1/docs"))
	t.Cleanup(ts.Close)
	tests := []struct {
		path     string
		status   int
		ctype    string
		contains string
	}{
		{"/netlox/v1/docs", 200, "text/html", `/netlox/v1/docs/swagger-ui-bundle.js`},
		{"/netlox/v1/docs/", 200, "text/html", `id="swagger-ui"`},
		{"/netlox/v1/docs/index.html", 200, "text/html", `id="swagger-ui"`},
		{"/netlox/v1/docs/swagger-ui-bundle.js", 200, "javascript", "SwaggerUIBundle"},
		{"/netlox/v1/docs/swagger-ui-standalone-preset.js", 200, "javascript", "SwaggerUIStandalonePreset"},
		{"/netlox/v1/docs/swagger-ui.css", 200, "text/css", ".swagger-ui"},
		{"/netlox/v1/docs/init.js", 200, "javascript", `url: "/netlox/v1/swagger.json"`},
		{"/netlox/v1/docs/favicon-32x32.png", 200, "image/png", ""},
		{"/netlox/v1/docs/LICENSE", 200, "", "Apache License"},
		{"/netlox/v1/docs/missing.js", 404, "", ""},
		{"/netlox/v1/docs/../../../etc/passwd", 404, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			resp, err := ts.Client().Get(ts.URL + tc.path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			if !strings.Contains(resp.Header.Get("Content-Type"), tc.ctype) {
				t.Errorf("Content-Type %q, want %q", resp.Header.Get("Content-Type"), tc.ctype)
			}
			if !strings.Contains(string(b), tc.contains) {
				t.Errorf("body lacks %q", tc.contains)
			}
		})
	}
}

// TestNoCDN: the UI must work air-gapped, so our own files reference only
// same-origin paths.
func TestNoCDN(t *testing.T) {
	for _, name := range []string{"ui/index.html", "ui/init.js"} {
		b, err := uiFiles.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "http://") || strings.Contains(string(b), "https://") {
			t.Errorf("%s references an absolute URL", name)
		}
	}
}
