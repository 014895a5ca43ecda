package rules

import (
	"net/http"
	"strings"
	"testing"

	"github.com/infergate/infergate/apierror"
)

func selectorRule() Rule {
	r := pdRule()
	r.Endpoints = nil
	r.EndpointSelector = &EndpointSelector{Model: "llama-3-8b"}
	return r
}

func TestSelectorRuleValidatesWithoutEndpoints(t *testing.T) {
	c, err := Compile(selectorRule())
	if err != nil {
		t.Fatal(err)
	}
	if c.EndpointSelector == nil || c.EndpointSelector.Model != "llama-3-8b" || c.EndpointSelector.Engine != "vllm" || len(c.Endpoints) != 0 {
		t.Fatalf("compiled selector %+v endpoints %v", c.EndpointSelector, c.Endpoints)
	}
}

func TestSelectorRuleRejections(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(*Rule)
		code  string
		field string
	}{
		{"no endpoints and no selector", func(r *Rule) { r.EndpointSelector = nil }, apierror.CodeInvalidField, "endpoints"},
		{"both", func(r *Rule) { r.Endpoints = pdRule().Endpoints }, apierror.CodeInvalidCombo, "endpoints"},
		{"no model", func(r *Rule) { r.EndpointSelector.Model = " " }, apierror.CodeInvalidField, "endpointSelector.model"},
		{"relative prefix", func(r *Rule) { r.EndpointSelector.Prefix = "infergate" }, apierror.CodeInvalidField, "endpointSelector.prefix"},
		{"foreign engine", func(r *Rule) { r.EndpointSelector.Engine = "sglang" }, apierror.CodeInvalidCombo, "endpointSelector.engine"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := selectorRule()
			tc.edit(&r)
			_, err := Compile(r)
			wantAPIError(t, err, http.StatusBadRequest, tc.code, tc.field, "")
		})
	}
}

func TestSelectorDecodesFromJSONAndYAML(t *testing.T) {
	body := `{"serviceArguments":{"externalIP":"10.0.0.10","port":2020,"protocol":"tcp","mode":4,"pd_disagg_mode":true},
	  "endpointSelector":{"prefix":"/infergate","model":"m","engine":"vllm"}}`
	r, err := DecodeJSON([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if r.EndpointSelector == nil || r.EndpointSelector.Model != "m" || r.EndpointSelector.Prefix != "/infergate" {
		t.Fatalf("decoded %+v", r.EndpointSelector)
	}
	if _, err := Compile(r); err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeJSON([]byte(strings.Replace(body, `"engine"`, `"bogus"`, 1))); err == nil {
		t.Fatal("unknown selector field accepted")
	}
}

func TestSelectorFromYAMLFile(t *testing.T) {
	const doc = "apiVersion: netlox/v1\nkind: Loadbalancer\nspec:\n" +
		"  serviceArguments: {externalIP: 10.0.0.10, port: 2020, protocol: tcp, mode: 4, pd_disagg_mode: true, kvEngineType: sglang}\n" +
		"  endpointSelector: {model: llama-3-8b, engine: sglang}\n"
	bodies, err := DocumentBodies("f.yaml", []byte(doc))
	if err != nil || len(bodies) != 1 {
		t.Fatalf("bodies %v err %v", bodies, err)
	}
	r, err := DecodeJSON(bodies[0].JSON)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Compile(r)
	if err != nil {
		t.Fatal(err)
	}
	if c.EndpointSelector == nil || c.EndpointSelector.Engine != "sglang" || c.EndpointSelector.Model != "llama-3-8b" {
		t.Fatalf("compiled selector %+v", c.EndpointSelector)
	}
}
