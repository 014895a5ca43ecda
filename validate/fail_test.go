package validate

import (
	"context"
	"net"
	"testing"

	"github.com/infergate/infergate/rules"
)

func TestFailVerdict(t *testing.T) {
	tests := []struct {
		name      string
		es        endpointState
		sent, bad int
		breaker   bool
		want      Status
	}{
		{"breaker opened, peers served", endpointState{State: "active", Breaker: "open"}, 6, 0, true, Pass},
		{"half-open trial counts as out", endpointState{State: "active", Breaker: "half-open"}, 6, 0, true, Pass},
		{"health probe took it out", endpointState{State: "probing", Breaker: "closed"}, 0, 0, true, Pass},
		{"a request was not served", endpointState{State: "active", Breaker: "open"}, 6, 1, true, Fail},
		{"breaker never opened", endpointState{State: "active", Breaker: "closed"}, maxFailRequests, 0, true, Fail},
		{"rule without breakers", endpointState{State: "active", Breaker: "closed"}, maxFailRequests, 0, false, Warn},
		{"rule without probes or breakers", endpointState{State: "unprobed", Breaker: "closed"}, maxFailRequests, 0, false, Warn},
		{"rule without probes, breaker never opened", endpointState{State: "unprobed", Breaker: "closed"}, maxFailRequests, 0, true, Fail},
		{"no runtime status", endpointState{}, maxFailRequests, 0, true, Warn},
	}
	for _, tc := range tests {
		if _, got := failVerdict(tc.es, tc.sent, tc.bad, tc.breaker); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// TestRefusedPort: a port with a listener is skipped, as is one the rule
// uses; the first that refuses connections is chosen.
func TestRefusedPort(t *testing.T) {
	open, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	closedLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Both held until both are chosen: a port closed at once can be the
	// kernel's next choice (closed and closed2 came out equal once).
	closed2Ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := closedLn.Addr().(*net.TCPAddr).Port
	closed2 := closed2Ln.Addr().(*net.TCPAddr).Port
	closedLn.Close()
	closed2Ln.Close()
	listening := open.Addr().(*net.TCPAddr).Port

	ctx := context.Background()
	got, err := refusedPort(ctx, "127.0.0.1", []int{listening, closed, closed2}, map[int]bool{closed: true})
	if err != nil || got != closed2 {
		t.Errorf("refusedPort = %d, %v; want %d (the listening port and the used one skipped)", got, err, closed2)
	}
	if got, err := refusedPort(ctx, "127.0.0.1", []int{listening}, nil); err == nil {
		t.Errorf("refusedPort over a listening port = %d, want an error", got)
	}
}

// TestLoneFailable: the only endpoint of its role is failed only where the
// gateway still serves every request without it (a role-0 fallback, and a
// vLLM decode that recomputes for a lone prefill); MoRI-IO is left alone
// with a WARN, since its decode never recomputes.
func TestLoneFailable(t *testing.T) {
	ep := func(role int, conn string) rules.Endpoint {
		return rules.Endpoint{EndpointIP: "10.0.0.1", TargetPort: 8000, Weight: 1, EPRole: role, KVConnector: conn}
	}
	rule := func(engine string, eps ...rules.Endpoint) rules.Rule {
		return rules.Rule{ServiceArguments: rules.ServiceArguments{PDDisaggMode: true, KVEngineType: engine}, Endpoints: eps}
	}
	for _, tc := range []struct {
		name   string
		r      rules.Rule
		i      int
		fail   bool
		status Status
	}{
		{"vLLM prefill with a role-0 fallback", rule("", ep(1, ""), ep(2, ""), ep(2, ""), ep(0, "")), 0, true, Pass},
		{"vLLM Mooncake prefill with a role-0 fallback", rule("vllm", ep(1, "MooncakeConnector"), ep(2, "MooncakeConnector"), ep(0, "")), 0, true, Pass},
		{"SGLang decode with a role-0 fallback", rule("sglang", ep(1, ""), ep(1, ""), ep(2, ""), ep(0, "")), 2, true, Pass},
		{"vLLM prefill without a role-0 endpoint", rule("", ep(1, ""), ep(2, "")), 0, false, Pass},
		{"SGLang prefill: no decode recomputes", rule("sglang", ep(1, ""), ep(2, ""), ep(0, "")), 0, false, Pass},
		{"TensorRT-LLM context: no decode recomputes", rule("trtllm", ep(1, ""), ep(2, ""), ep(0, "")), 0, false, Pass},
		{"the role-0 endpoint itself", rule("", ep(1, ""), ep(2, ""), ep(0, "")), 2, false, Pass},
		{"MoRI-IO", rule("", ep(1, "MoRIIOConnector"), ep(2, "MoRIIOConnector"), ep(0, "")), 0, false, Warn},
		{"single pool", rules.Rule{Endpoints: []rules.Endpoint{ep(0, "")}}, 0, false, Pass},
	} {
		why, st := loneFailable(tc.r, tc.i)
		if (why == "") != tc.fail || st != tc.status {
			t.Errorf("%s: why %q status %s, want failed=%v status %s", tc.name, why, st, tc.fail, tc.status)
		}
	}
}
