package api_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/infergate/infergate/api"
	"github.com/infergate/infergate/rules"
)

// undocumented are the routes deliberately outside the OpenAPI document,
// each with the reason. Everything else must be documented.
var undocumented = map[string]string{
	"GET /healthz":              "process probe outside the API base path",
	"GET /readyz":               "readiness probe outside the API base path",
	"GET /readyz/pd":            "P/D readiness probe outside the API base path",
	"GET /metrics":              "Prometheus' conventional path; documented as /netlox/v1/metrics",
	"GET /netlox/v1/docs/*file": "Swagger UI static assets",
	"GET /version":              "conventional path; documented as /netlox/v1/version",
}

var ginParam = regexp.MustCompile(`:([A-Za-z_]+)`)

// fetchDoc reads the document the server actually serves.
func fetchDoc(t *testing.T, h *harness) map[string]any {
	t.Helper()
	r := h.do(t, http.MethodGet, "/netlox/v1/swagger.json", nil)
	if r.status != 200 {
		t.Fatalf("swagger.json: %d", r.status)
	}
	var doc map[string]any
	if err := json.Unmarshal(r.body, &doc); err != nil {
		t.Fatalf("swagger.json is not JSON: %v", err)
	}
	return doc
}

// TestOpenAPIMatchesRouter: every documented operation is a gin route and
// every gin route is documented (or listed in undocumented with a reason).
func TestOpenAPIMatchesRouter(t *testing.T) {
	h := newHarness(t, true, nil)
	doc := fetchDoc(t, h)
	base, _ := doc["basePath"].(string)
	documented := map[string]bool{}
	paths, _ := doc["paths"].(map[string]any)
	for p, item := range paths {
		for m := range item.(map[string]any) {
			documented[strings.ToUpper(m)+" "+base+p] = true
		}
	}
	routed := map[string]bool{}
	for _, r := range h.routes(t) {
		if _, skip := undocumented[r]; skip {
			continue
		}
		routed[r] = true
	}
	var missingDoc, missingRoute []string
	for r := range routed {
		if !documented[r] {
			missingDoc = append(missingDoc, r)
		}
	}
	for d := range documented {
		if !routed[d] {
			missingRoute = append(missingRoute, d)
		}
	}
	sort.Strings(missingDoc)
	sort.Strings(missingRoute)
	if len(missingDoc) > 0 {
		t.Errorf("routes missing from the OpenAPI document: %v", missingDoc)
	}
	if len(missingRoute) > 0 {
		t.Errorf("documented operations with no route: %v", missingRoute)
	}
	if len(documented) < 13 {
		t.Errorf("only %d documented operations; want every rule route", len(documented))
	}
}

// TestOpenAPIPathParamsDeclared: every {param} in a documented path has a
// matching path parameter, or Swagger UI cannot build the request.
func TestOpenAPIPathParamsDeclared(t *testing.T) {
	h := newHarness(t, true, nil)
	doc := fetchDoc(t, h)
	brace := regexp.MustCompile(`\{([^}]+)\}`)
	for p, item := range doc["paths"].(map[string]any) {
		for m, op := range item.(map[string]any) {
			declared := map[string]bool{}
			params, _ := op.(map[string]any)["parameters"].([]any)
			for _, prm := range params {
				pm := prm.(map[string]any)
				if pm["in"] == "path" {
					declared[pm["name"].(string)] = true
				}
			}
			for _, want := range brace.FindAllStringSubmatch(p, -1) {
				if !declared[want[1]] {
					t.Errorf("%s %s: path parameter %q not declared", m, p, want[1])
				}
			}
			if len(declared) != len(brace.FindAllString(p, -1)) {
				t.Errorf("%s %s: declares %d path params, path has %d", m, p, len(declared), len(brace.FindAllString(p, -1)))
			}
		}
	}
}

// TestOpenAPIExamplesCompile: every example body in the served document
// decodes strictly and compiles, and is accepted by the API itself.
func TestOpenAPIExamplesCompile(t *testing.T) {
	h := newHarness(t, true, nil)
	doc := fetchDoc(t, h)
	examples := map[string]any{}
	post := doc["paths"].(map[string]any)["/config/loadbalancer"].(map[string]any)["post"].(map[string]any)
	for name, ex := range post["x-examples"].(map[string]any) {
		examples["x-examples/"+name] = ex
	}
	entry := doc["definitions"].(map[string]any)["LoadbalanceEntry"].(map[string]any)
	examples["definitions/LoadbalanceEntry.example"] = entry["example"]
	if len(examples) < 2 {
		t.Fatalf("found %d examples, want the x-examples and the schema example", len(examples))
	}
	var sawVLLMPD bool
	for name, ex := range examples {
		t.Run(name, func(t *testing.T) {
			body, err := json.Marshal(ex)
			if err != nil {
				t.Fatal(err)
			}
			r, err := rules.DecodeJSON(body)
			if err != nil {
				t.Fatalf("DecodeJSON: %v", err)
			}
			c, err := rules.Compile(r)
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			if c.PD != nil && c.Engine == "vllm" && len(c.Endpoints) == 2 {
				sawVLLMPD = true
			}
			// The example must also be accepted over the wire (once; a
			// second POST of the schema example is the 409 re-POST).
			resp := h.do(t, http.MethodPost, lb, body)
			if resp.status != 200 && resp.status != 409 {
				t.Errorf("POST example: %d %s", resp.status, resp.body)
			}
		})
	}
	if !sawVLLMPD {
		t.Error("no vLLM P/D 1P1D example in the document")
	}
}

// routes lists the server's routes as "METHOD /path/{param}".
func (h *harness) routes(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, r := range h.srv.Routes() {
		out = append(out, r.Method+" "+ginParam.ReplaceAllString(r.Path, "{$1}"))
	}
	return out
}

// TestErrorExamplesMatchErrorBody: every documented error example has the
// shape writeError produces and its code equals the response status.
func TestErrorExamplesMatchErrorBody(t *testing.T) {
	h := newHarness(t, true, nil)
	doc := fetchDoc(t, h)
	n := 0
	for p, item := range doc["paths"].(map[string]any) {
		for m, op := range item.(map[string]any) {
			for status, resp := range op.(map[string]any)["responses"].(map[string]any) {
				if status < "400" {
					continue
				}
				ex, ok := resp.(map[string]any)["examples"].(map[string]any)["application/json"]
				if !ok {
					t.Errorf("%s %s %s: no error example", m, p, status)
					continue
				}
				b, _ := json.Marshal(ex)
				dec := json.NewDecoder(bytes.NewReader(b))
				dec.DisallowUnknownFields()
				var e api.ErrorBody
				if err := dec.Decode(&e); err != nil {
					t.Errorf("%s %s %s: example is not an ErrorBody: %v", m, p, status, err)
					continue
				}
				if strconv.Itoa(e.Code) != status || e.ErrorCode == "" || e.Message == "" || e.Result == "" {
					t.Errorf("%s %s %s: example %+v", m, p, status, e)
				}
				n++
			}
		}
	}
	if n < 20 {
		t.Errorf("checked %d error examples, want every error response", n)
	}
}
