package rules

import (
	"strings"
	"testing"
)

// TestTenantDocumentEnvelope: kind: ApiKey and kind: TenantLimit documents
// pass through with their spec as JSON; their envelope is checked here.
func TestTenantDocumentEnvelope(t *testing.T) {
	cases := []struct {
		name, doc, kind, wantErr string
	}{
		{"api key", "apiVersion: infergate.io/v1\nkind: ApiKey\nspec: {tenant_id: t, name: n}\n", KindAPIKey, ""},
		{"tenant limit", "apiVersion: infergate/v1\nkind: TenantLimit\nmetadata: {labels: {a: b}}\nspec: {tenant_id: t, rps: 1}\n", KindTenantLimit, ""},
		{"netlox apiVersion", "apiVersion: netlox/v1\nkind: ApiKey\nspec: {tenant_id: t}\n", "", "apiVersion"},
		{"no spec", "apiVersion: infergate/v1\nkind: ApiKey\n", "", "spec mapping"},
		{"unknown top key", "apiVersion: infergate/v1\nkind: ApiKey\nspce: {}\nspec: {}\n", "", "spce"},
		{"metadata not a mapping", "apiVersion: infergate/v1\nkind: ApiKey\nmetadata: x\nspec: {}\n", "", "metadata"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := DocumentBodies("f.yaml", []byte(c.doc))
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want one naming %q", err, c.wantErr)
				}
				return
			}
			if err != nil || len(b) != 1 || b[0].Kind != c.kind || !strings.Contains(string(b[0].JSON), `"tenant_id":"t"`) {
				t.Fatalf("bodies = %+v, %v", b, err)
			}
		})
	}
	// A rule next to them keeps its kind.
	b, err := DocumentBodies("f.yaml", []byte("apiVersion: netlox/v1\nkind: Loadbalancer\nspec: {serviceArguments: {externalIP: 127.0.0.1, port: 80}}\n"))
	if err != nil || len(b) != 1 || b[0].Kind != KindLoadbalancer {
		t.Fatalf("rule: %+v %v", b, err)
	}
}
