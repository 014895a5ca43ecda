package rules

import (
	"net/http"
	"testing"

	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/spec"
)

// TestAllowAdminPaths: the opt-in decodes, compiles next to the engine the
// rule names ("" when kvEngineType is absent: every engine's paths stay
// closed), and is refused when it is not a boolean.
func TestAllowAdminPaths(t *testing.T) {
	for _, tc := range []struct {
		name, extra string
		want        spec.AdminSurface
	}{
		{"default", ``, spec.AdminSurface{}},
		{"sglang", `,"kvEngineType":"sglang"`, spec.AdminSurface{Engine: spec.EngineSGLang}},
		{"opened", `,"kvEngineType":"vllm","allow_admin_paths":true`, spec.AdminSurface{Engine: spec.EngineVLLM, Open: true}},
		{"explicit false", `,"allow_admin_paths":false`, spec.AdminSurface{}},
	} {
		body := `{"serviceArguments":{"externalIP":"10.0.0.10","port":2020,"protocol":"tcp","mode":4` + tc.extra +
			`},"endpoints":[{"endpointIP":"10.1.0.1","targetPort":8000,"weight":1}]}`
		r, err := DecodeJSON([]byte(body))
		if err != nil {
			t.Fatalf("%s: decode: %v", tc.name, err)
		}
		sr, err := Compile(r)
		if err != nil {
			t.Fatalf("%s: compile: %v", tc.name, err)
		}
		if sr.Admin != tc.want {
			t.Errorf("%s: Admin = %+v, want %+v", tc.name, sr.Admin, tc.want)
		}
	}
	_, err := DecodeJSON([]byte(`{"serviceArguments":{"externalIP":"10.0.0.10","port":2020,"protocol":"tcp","mode":4,"allow_admin_paths":"yes"},` +
		`"endpoints":[{"endpointIP":"10.1.0.1","targetPort":8000,"weight":1}]}`))
	if err == nil {
		t.Fatal(`allow_admin_paths "yes" decoded`)
	}
}

func TestRuleNameRejectsControlCharacters(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"chat-prod", true},
		{"модель 1", true},
		{"a\nb", false},
		{"a\x1b[31mred", false},
		{"a\x7f", false},
		{"a\u0085b", false}, // NEL, a C1 control
		{"\xff", false},
	} {
		r := plainRule()
		r.ServiceArguments.Name = tc.name
		_, err := Compile(r)
		if tc.ok {
			if err != nil {
				t.Errorf("name %q: %v", tc.name, err)
			}
			continue
		}
		wantAPIError(t, err, http.StatusBadRequest, apierror.CodeInvalidField, "serviceArguments.name", "")
	}
}

func TestEndpointIsNotTheRulesOwnVIP(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mod   func(*Rule)
		field string // "" = accepted
	}{
		{"other engine", func(*Rule) {}, ""},
		{"the VIP:port", func(r *Rule) { r.Endpoints[1] = Endpoint{EndpointIP: "10.0.0.10", TargetPort: 2020, Weight: 1} }, "endpoints[1].endpointIP"},
		{"the VIP, another port", func(r *Rule) { r.Endpoints[1] = Endpoint{EndpointIP: "10.0.0.10", TargetPort: 8000, Weight: 1} }, ""},
		{"a secondary VIP", func(r *Rule) {
			r.SecondaryVIPs = []SecondaryVIP{{Address: "10.0.0.11"}}
			r.Endpoints[0] = Endpoint{EndpointIP: "10.0.0.11", TargetPort: 2020, Weight: 1}
		}, "endpoints[0].endpointIP"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := plainRule()
			tc.mod(&r)
			_, err := Compile(r)
			if tc.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantAPIError(t, err, http.StatusBadRequest, apierror.CodeEndpointIsGateway, tc.field, "")
		})
	}
}
