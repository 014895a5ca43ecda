package validate

import (
	"context"
	"net"
	"testing"
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
	closed := closedLn.Addr().(*net.TCPAddr).Port
	closedLn.Close()
	closed2Ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed2 := closed2Ln.Addr().(*net.TCPAddr).Port
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
