package rules

import (
	"strings"
	"testing"

	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/spec"
)

// TestEndpointOverrides: each range-checked integer the rule sets and an
// endpoint may override (admission_window, max_model_len) is decoded,
// bounded and compiled, and its accessor resolves each endpoint's value:
// the endpoint's own, else the rule's.
func TestEndpointOverrides(t *testing.T) {
	const body = `{"serviceArguments":{"externalIP":"10.0.0.1","port":80,"protocol":"tcp","mode":4,"FIELD":RULE},` +
		`"endpoints":[{"endpointIP":"10.1.0.1","targetPort":8000,"weight":1,"FIELD":EP},` +
		`{"endpointIP":"10.1.0.2","targetPort":8000,"weight":1}]}`
	type tcase struct {
		rule, ep string
		want     [2]int // of(0), of(1)
		field    string // error field when rejected
	}
	for _, f := range []struct {
		name  string
		of    func(c *spec.Rule, i int) int
		cases []tcase
	}{
		{"admission_window", (*spec.Rule).WindowOf, []tcase{
			{"0", "0", [2]int{0, 0}, ""},
			{"8", "0", [2]int{8, 8}, ""},
			{"8", "4", [2]int{4, 8}, ""},
			{"0", "4", [2]int{4, 0}, ""},
			{"65536", "1", [2]int{1, 65536}, ""},
			{"-1", "0", [2]int{}, "serviceArguments.admission_window"},
			{"65537", "0", [2]int{}, "serviceArguments.admission_window"},
			{"0", "-3", [2]int{}, "endpoints[0].admission_window"},
		}},
		{"max_model_len", (*spec.Rule).MaxModelLenOf, []tcase{
			{"0", "0", [2]int{0, 0}, ""},
			{"8192", "0", [2]int{8192, 8192}, ""},
			{"8192", "4096", [2]int{4096, 8192}, ""},
			{"0", "32768", [2]int{32768, 0}, ""},
			{"16777216", "1", [2]int{1, 16777216}, ""},
			{"-1", "0", [2]int{}, "serviceArguments.max_model_len"},
			{"16777217", "0", [2]int{}, "serviceArguments.max_model_len"},
			{"0", "-3", [2]int{}, "endpoints[0].max_model_len"},
		}},
	} {
		for _, tc := range f.cases {
			t.Run(f.name+"/"+tc.rule+"/"+tc.ep, func(t *testing.T) {
				r, err := DecodeJSON([]byte(strings.NewReplacer("FIELD", f.name, "RULE", tc.rule, "EP", tc.ep).Replace(body)))
				if err != nil {
					t.Fatal(err)
				}
				c, err := Compile(r)
				if tc.field != "" {
					wantAPIError(t, err, 400, apierror.CodeInvalidField, tc.field, "")
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if got := [2]int{f.of(c, 0), f.of(c, 1)}; got != tc.want {
					t.Fatalf("%s %v, want %v", f.name, got, tc.want)
				}
			})
		}
	}
}

// TestAdmissionWindowPD: on a P/D rule the rule's window bounds the
// decodes; a prefill only through its own field.
func TestAdmissionWindowPD(t *testing.T) {
	r := pdRule()
	r.ServiceArguments.AdmissionWindow = 6
	c, err := Compile(r)
	if err != nil {
		t.Fatal(err)
	}
	if p, d := c.WindowOf(0), c.WindowOf(1); p != 0 || d != 6 {
		t.Fatalf("prefill %d decode %d, want 0 and 6", p, d)
	}
	r.Endpoints[0].AdmissionWindow = 12
	if c, err = Compile(r); err != nil || c.WindowOf(0) != 12 {
		t.Fatalf("prefill's own window: %v %d", err, c.WindowOf(0))
	}
}
