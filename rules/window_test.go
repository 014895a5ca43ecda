package rules

import (
	"strings"
	"testing"

	"github.com/infergate/infergate/apierror"
)

// TestAdmissionWindow: admission_window on the rule and on an endpoint is
// decoded, bounded and compiled; WindowOf resolves each endpoint's.
func TestAdmissionWindow(t *testing.T) {
	const body = `{"serviceArguments":{"externalIP":"10.0.0.1","port":80,"protocol":"tcp","mode":4,"admission_window":RULE},` +
		`"endpoints":[{"endpointIP":"10.1.0.1","targetPort":8000,"weight":1,"admission_window":EP},` +
		`{"endpointIP":"10.1.0.2","targetPort":8000,"weight":1}]}`
	for _, tc := range []struct {
		rule, ep string
		want     [2]int // WindowOf(0), WindowOf(1)
		field    string // error field when rejected
	}{
		{"0", "0", [2]int{0, 0}, ""},
		{"8", "0", [2]int{8, 8}, ""},
		{"8", "4", [2]int{4, 8}, ""},
		{"0", "4", [2]int{4, 0}, ""},
		{"65536", "1", [2]int{1, 65536}, ""},
		{"-1", "0", [2]int{}, "serviceArguments.admission_window"},
		{"65537", "0", [2]int{}, "serviceArguments.admission_window"},
		{"0", "-3", [2]int{}, "endpoints[0].admission_window"},
	} {
		t.Run(tc.rule+"/"+tc.ep, func(t *testing.T) {
			r, err := DecodeJSON([]byte(strings.NewReplacer("RULE", tc.rule, "EP", tc.ep).Replace(body)))
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
			if got := [2]int{c.WindowOf(0), c.WindowOf(1)}; got != tc.want {
				t.Fatalf("windows %v, want %v", got, tc.want)
			}
		})
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
