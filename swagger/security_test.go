package swagger

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestSecurityDocumented: the document declares the bearer scheme globally
// (Swagger UI's Authorize button), the UI and the document itself are open
// (security: []), and every other operation documents 401 and 403.
func TestSecurityDocumented(t *testing.T) {
	d := Document(Views{Result: struct{}{}, Error: errorExample{}, Compiled: struct{}{}, Status: struct{}{}})
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"securityDefinitions":{"bearerToken":{"type":"apiKey","name":"Authorization","in":"header"`) ||
		!strings.Contains(string(b), `"security":[{"bearerToken":[]}]`) {
		t.Fatalf("no global bearer security in %.400s", b)
	}
	for path, item := range d.Paths {
		for method, op := range item {
			open := path == "/docs" || path == "/swagger.json"
			if got := op.Security != nil && len(*op.Security) == 0; got != open {
				t.Errorf("%s %s: open = %v, want %v", method, path, got, open)
			}
			if !open && (op.Responses["401"] == nil || op.Responses["403"] == nil) {
				t.Errorf("%s %s: 401/403 not documented", method, path)
			}
		}
	}
	if !strings.Contains(string(b), `"security":[]`) {
		t.Error("open operations do not serialise security: []")
	}
}
