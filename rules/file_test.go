package rules

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/infergate/infergate/apierror"
)

// TestDocumentBodies covers the YAML envelope and loxicmd's key spellings;
// it stops before DecodeJSON so it pins only what file.go owns.
func TestDocumentBodies(t *testing.T) {
	const env = "apiVersion: netlox/v1\nkind: Loadbalancer\n"
	tests := []struct {
		name      string
		yaml      string
		wantSA    map[string]any // expected serviceArguments per document
		wantCode  string
		wantField string
		wantMsg   string
	}{
		{name: "plain", yaml: env + "spec:\n  serviceArguments: {externalIP: 127.0.0.1, port: 80}\n",
			wantSA: map[string]any{"externalIP": "127.0.0.1", "port": 80.0}},
		{name: "loxicmd aliases", yaml: env + "spec:\n  serviceArguments: {path: h.example, portmax: 90, Monitor: true, BGP: false}\n",
			wantSA: map[string]any{"host": "h.example", "portMax": 90.0, "monitor": true, "bgp": false}},
		{name: "metadata block and name", yaml: env + "metadata: {block: 7, name: pool, hostname: x}\nspec:\n  serviceArguments: {port: 80}\n",
			wantSA: map[string]any{"port": 80.0, "block": 7.0, "name": "pool"}},
		{name: "metadata equal to spec", yaml: env + "metadata: {block: 7}\nspec:\n  serviceArguments: {block: 7}\n",
			wantSA: map[string]any{"block": 7.0}},
		{name: "infergate apiVersion and lb kind", yaml: "apiVersion: infergate/v1\nkind: lb\nspec: {serviceArguments: {port: 1}}\n",
			wantSA: map[string]any{"port": 1.0}},
		{name: "LB kind", yaml: "apiVersion: infergate/v1\nkind: LB\nspec: {serviceArguments: {port: 1}}\n",
			wantSA: map[string]any{"port": 1.0}},
		{name: "metadata conflicts", yaml: env + "metadata: {block: 7}\nspec:\n  serviceArguments: {block: 8}\n",
			wantCode: apierror.CodeInvalidCombo, wantField: "metadata.block"},
		{name: "both spellings", yaml: env + "spec:\n  serviceArguments: {path: a, host: b}\n",
			wantCode: apierror.CodeInvalidCombo, wantField: "serviceArguments.path"},
		{name: "kind LoadBalancer", yaml: "apiVersion: netlox/v1\nkind: LoadBalancer\nspec: {}\n",
			wantCode: apierror.CodeInvalidField, wantField: "kind", wantMsg: `did you mean "Loadbalancer"`},
		{name: "kind Service", yaml: "apiVersion: netlox/v1\nkind: Service\nspec: {}\n",
			wantCode: apierror.CodeInvalidField, wantField: "kind", wantMsg: `"Service"`},
		{name: "apiVersion v2", yaml: "apiVersion: netlox/v2\nkind: lb\nspec: {}\n",
			wantCode: apierror.CodeInvalidField, wantField: "apiVersion"},
		{name: "no spec", yaml: env,
			wantCode: apierror.CodeInvalidField, wantField: "spec"},
		{name: "unknown top key", yaml: env + "Spec: {}\n",
			wantCode: apierror.CodeUnknownField, wantField: "Spec", wantMsg: `did you mean "spec"`},
		{name: "unknown metadata key", yaml: env + "metadata: {blok: 1}\nspec: {}\n",
			wantCode: apierror.CodeUnknownField, wantField: "metadata.blok"},
		{name: "not a mapping", yaml: "- a\n- b\n",
			wantCode: apierror.CodeMalformedJSON},
		{name: "syntax", yaml: "kind: [\n",
			wantCode: apierror.CodeMalformedJSON},
		{name: "numeric key", yaml: env + "spec: {serviceArguments: {1: x}}\n",
			wantCode: apierror.CodeMalformedJSON},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DocumentBodies("f.yaml", []byte(tc.yaml))
			if tc.wantCode != "" {
				ae, ok := apierror.As(err)
				if !ok {
					t.Fatalf("err = %v, want apierror %s", err, tc.wantCode)
				}
				if ae.Code != tc.wantCode || ae.Field != tc.wantField {
					t.Fatalf("err = (%s, %q), want (%s, %q): %v", ae.Code, ae.Field, tc.wantCode, tc.wantField, err)
				}
				if !strings.Contains(err.Error(), "f.yaml#1") || !strings.Contains(err.Error(), tc.wantMsg) {
					t.Fatalf("err %q lacks source or %q", err, tc.wantMsg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 {
				t.Fatalf("got %d documents, want 1", len(got))
			}
			var body struct {
				ServiceArguments map[string]any `json:"serviceArguments"`
			}
			if err := json.Unmarshal(got[0].JSON, &body); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(body.ServiceArguments, tc.wantSA) {
				t.Fatalf("serviceArguments = %v, want %v", body.ServiceArguments, tc.wantSA)
			}
		})
	}
}

// TestDocumentBodiesMulti pins document numbering: empty documents are
// skipped but counted so "#n" is the n-th document of the file.
func TestDocumentBodiesMulti(t *testing.T) {
	const doc = "apiVersion: netlox/v1\nkind: Loadbalancer\nspec: {serviceArguments: {port: %d}}\n"
	in := "# header only\n---\n" + strings.Replace(doc, "%d", "1", 1) + "---\n# nothing\n---\n" + strings.Replace(doc, "%d", "2", 1)
	got, err := DocumentBodies("m.yaml", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	var sources []string
	for _, d := range got {
		sources = append(sources, d.Source)
	}
	want := []string{"m.yaml#1", "m.yaml#3"} // a leading comment block belongs to document 1
	if !reflect.DeepEqual(sources, want) {
		t.Fatalf("sources = %v, want %v", sources, want)
	}
}

func TestRuleFiles(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"b.yml", "a.yaml", "c.YAML", "notes.txt", "z.json"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o700); err != nil {
		t.Fatal(err)
	}
	got, err := ruleFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yml"), filepath.Join(dir, "c.YAML")}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ruleFiles = %v, want %v", got, want)
	}
	if _, err := ruleFiles(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Fatal("missing path: want error")
	}
}

// FuzzDocumentBodies: any input either fails with an *apierror.Error that
// names its document, or yields valid JSON bodies; it never panics.
func FuzzDocumentBodies(f *testing.F) {
	for _, seed := range []string{
		"apiVersion: netlox/v1\nkind: Loadbalancer\nmetadata: {block: 1}\nspec:\n  serviceArguments: {path: h, portmax: 2}\n",
		"---\n---\napiVersion: infergate/v1\nkind: lb\nspec: {endpoints: [{endpointIP: 127.0.0.1}]}\n",
		"kind: LoadBalancer\n",
		"[1, 2]\n",
		"apiVersion: netlox/v1\nkind: LB\nspec: {serviceArguments: {1: 2}}\n",
		"a: &x [*x]\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		bodies, err := DocumentBodies("f.yaml", data)
		if err != nil {
			if _, ok := apierror.As(err); !ok {
				t.Fatalf("error is not an apierror: %v", err)
			}
			if !strings.Contains(err.Error(), "f.yaml#") {
				t.Fatalf("error does not name the document: %v", err)
			}
			return
		}
		for _, b := range bodies {
			if !json.Valid(b.JSON) {
				t.Fatalf("%s: invalid JSON %q", b.Source, b.JSON)
			}
		}
	})
}
