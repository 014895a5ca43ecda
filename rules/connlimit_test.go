package rules

import (
	"strings"
	"testing"

	"github.com/infergate/infergate/apierror"
)

// TestConnectionLimit: LoxiLB's connectionLimit is accepted on the wire,
// validated and compiled (it used to be an unknown field).
func TestConnectionLimit(t *testing.T) {
	const body = `{"serviceArguments":{"externalIP":"10.0.0.1","port":80,"protocol":"tcp","mode":4,"connectionLimit":VALUE},` +
		`"endpoints":[{"endpointIP":"10.1.0.1","targetPort":8000,"weight":1}]}`
	for _, tc := range []struct {
		value string
		want  int    // compiled cap when accepted
		code  string // error code when rejected
	}{
		{"0", 0, ""},
		{"100", 100, ""},
		{"10000000", 10000000, ""},
		{"-1", 0, apierror.CodeInvalidField},
		{"10000001", 0, apierror.CodeInvalidField},
		{`"5"`, 0, apierror.CodeMalformedJSON},
	} {
		t.Run(tc.value, func(t *testing.T) {
			r, err := DecodeJSON([]byte(strings.Replace(body, "VALUE", tc.value, 1)))
			if err == nil {
				c, cerr := Compile(r)
				if err = cerr; err == nil && c.ConnectionLimit != tc.want {
					t.Fatalf("compiled ConnectionLimit = %d, want %d", c.ConnectionLimit, tc.want)
				}
			}
			if tc.code == "" {
				if err != nil {
					t.Fatalf("rejected: %v", err)
				}
				return
			}
			ae, ok := apierror.As(err)
			if !ok || ae.Code != tc.code || ae.Field != "serviceArguments.connectionLimit" {
				t.Fatalf("err = %v, want %s on serviceArguments.connectionLimit", err, tc.code)
			}
		})
	}
}
