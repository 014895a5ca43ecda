package datapath

import (
	"net"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/infergate/infergate/spec"
)

// TestProbelessRulesStartNoProber: rules without probes cost no goroutine
// each; an update that turns probes on starts a prober (a dead endpoint is
// then marked down), and one that turns them off again stops it.
func TestProbelessRulesStartNoProber(t *testing.T) {
	const rules = 40
	rt, _ := newTestRuntime(t, testOptions())
	eng := startEngine(t, "e1")
	port := freePort(t)
	first := newRule("127.0.0.1", port, spec.SelRoundRobin, epFor(t, eng.Addr(), 1))
	first.Key.Host = "h0.example"
	if err := rt.Install(nil, first); err != nil { // the listener's goroutines
		t.Fatal(err)
	}
	settle := func() int {
		time.Sleep(50 * time.Millisecond)
		return runtime.NumGoroutine()
	}
	base := settle()
	var rs []*spec.Rule
	for i := 1; i <= rules; i++ {
		r := newRule("127.0.0.1", port, spec.SelRoundRobin, epFor(t, eng.Addr(), 1))
		r.Key.Host = "h" + strconv.Itoa(i) + ".example"
		r.Name = "probeless-" + strconv.Itoa(i)
		if err := rt.Install(nil, r); err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	if grew := settle() - base; grew > rules/4 {
		t.Fatalf("%d probe-less rules started %d goroutines", rules, grew)
	}

	// Probes on for one rule, whose endpoint is a closed port: marked down.
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	prev := rs[0]
	next := *prev
	next.Generation++
	next.Endpoints = []spec.Endpoint{epFor(t, deadAddr, 1)}
	next.Probe = spec.Probe{Type: probeTCP, Timeout: 200 * time.Millisecond, Retries: 1}
	if err := rt.Install(prev, &next); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the probed endpoint to be marked down", func() bool {
		rt.mu.Lock()
		c := rt.rules[next.Key].cur.Load()
		rt.mu.Unlock()
		return c.eps[0].health.Load() == healthDown
	})
	withProber := settle()

	// Probes off again: the prober stops.
	off := next
	off.Generation++
	off.Probe = spec.Probe{Type: probeNone}
	if err := rt.Install(&next, &off); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the prober to stop", func() bool {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		return !rt.rules[off.Key].probing
	})
	if after := settle(); after >= withProber {
		t.Fatalf("goroutines %d with the prober, %d after probes were turned off", withProber, after)
	}
}
