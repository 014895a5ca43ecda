package rules

import (
	"strings"
	"testing"

	"github.com/infergate/infergate/apierror"
)

// TestMaxModelLen: max_model_len on the rule and on an endpoint is decoded,
// bounded and compiled; MaxModelLenOf resolves each endpoint's.
func TestMaxModelLen(t *testing.T) {
	const body = `{"serviceArguments":{"externalIP":"10.0.0.1","port":80,"protocol":"tcp","mode":4,"max_model_len":RULE},` +
		`"endpoints":[{"endpointIP":"10.1.0.1","targetPort":8000,"weight":1,"max_model_len":EP},` +
		`{"endpointIP":"10.1.0.2","targetPort":8000,"weight":1}]}`
	for _, tc := range []struct {
		rule, ep string
		want     [2]int // MaxModelLenOf(0), MaxModelLenOf(1)
		field    string // error field when rejected
	}{
		{"0", "0", [2]int{0, 0}, ""},
		{"8192", "0", [2]int{8192, 8192}, ""},
		{"8192", "4096", [2]int{4096, 8192}, ""},
		{"0", "32768", [2]int{32768, 0}, ""},
		{"16777216", "1", [2]int{1, 16777216}, ""},
		{"-1", "0", [2]int{}, "serviceArguments.max_model_len"},
		{"16777217", "0", [2]int{}, "serviceArguments.max_model_len"},
		{"0", "-3", [2]int{}, "endpoints[0].max_model_len"},
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
			if got := [2]int{c.MaxModelLenOf(0), c.MaxModelLenOf(1)}; got != tc.want {
				t.Fatalf("max model lengths %v, want %v", got, tc.want)
			}
		})
	}
}
