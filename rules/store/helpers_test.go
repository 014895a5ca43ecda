package store

import (
	"errors"
	"fmt"
	"testing"

	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/rules"
)

// Rule fixtures, as in package rules' own tests.

// plainRule is a minimal valid single-pool rule.
func plainRule() rules.Rule {
	return rules.Rule{
		ServiceArguments: rules.ServiceArguments{ExternalIP: "10.0.0.10", Port: 2020, Protocol: "tcp", Mode: 4, Name: "plain"},
		Endpoints: []rules.Endpoint{
			{EndpointIP: "10.1.0.1", TargetPort: 8000, Weight: 1},
			{EndpointIP: "10.1.0.2", TargetPort: 8000, Weight: 1},
		},
	}
}

// pdRule is a minimal valid vLLM P/D rule with KV-exact mode 1.
func pdRule() rules.Rule {
	return rules.Rule{
		ServiceArguments: rules.ServiceArguments{ExternalIP: "10.0.0.10", Port: 2020, Protocol: "tcp", Mode: 4, Name: "pd",
			PDDisaggMode: true, PDCacheAwareMode: true, KVExactMode: 1, SSEMode: true},
		Endpoints: []rules.Endpoint{
			{EndpointIP: "10.1.0.1", TargetPort: 8000, Weight: 1, EPRole: 1, NixlPort: 9001},
			{EndpointIP: "10.1.0.2", TargetPort: 8000, Weight: 1, EPRole: 2},
		},
	}
}

// pdRuleN is a P/D rule with n endpoints (half prefill, half decode).
func pdRuleN(n int) rules.Rule {
	r := pdRule()
	r.Endpoints = nil
	for i := 0; i < n; i++ {
		r.Endpoints = append(r.Endpoints, rules.Endpoint{
			EndpointIP: fmt.Sprintf("10.1.%d.%d", i/200, i%200+1), TargetPort: 8000, Weight: 1,
			EPRole: 1 + i%2, NixlPort: 9000 + i,
		})
	}
	return r
}

// wantAPIError asserts err is an *apierror.Error with these fields ("" result
// = do not check).
func wantAPIError(t *testing.T, err error, status int, code, field, result string) *apierror.Error {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %d %s at %q", status, code, field)
	}
	var ae *apierror.Error
	if !errors.As(err, &ae) {
		t.Fatalf("error %v (%T) is not an *apierror.Error", err, err)
	}
	if ae.Status != status || ae.Code != code || ae.Field != field || (result != "" && ae.Result != result) {
		t.Fatalf("got  {%d %s field=%q result=%q} msg=%q\nwant {%d %s field=%q result=%q}",
			ae.Status, ae.Code, ae.Field, ae.Result, ae.Message, status, code, field, result)
	}
	return ae
}
