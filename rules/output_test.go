package rules

import (
	"reflect"
	"testing"
)

// TestSpecOnly: every output-only field is cleared, the spec fields stay,
// and the caller's rule is left as it was.
func TestSpecOnly(t *testing.T) {
	in := Rule{
		Status: &RuleStatus{Ready: true},
		Endpoints: []Endpoint{{EndpointIP: "10.1.0.1", TargetPort: 8000, Weight: 1,
			State: "active", Counter: "3:120", Health: "active", EngineLoad: "queue 0", WindowLoad: "3/16"}},
	}
	got := SpecOnly(in)
	want := Endpoint{EndpointIP: "10.1.0.1", TargetPort: 8000, Weight: 1}
	if got.Status != nil || len(got.Endpoints) != 1 || !reflect.DeepEqual(got.Endpoints[0], want) {
		t.Fatalf("SpecOnly = %+v, want status nil and endpoints %+v", got, want)
	}
	if in.Status == nil || in.Endpoints[0].State != "active" || in.Endpoints[0].EngineLoad != "queue 0" {
		t.Fatalf("SpecOnly changed its argument: %+v", in)
	}
	if SpecOnly(Rule{}).Endpoints != nil {
		t.Fatal("SpecOnly of a rule without endpoints made some")
	}
}
