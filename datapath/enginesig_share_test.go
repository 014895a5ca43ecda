package datapath

import (
	"os"
	"testing"
	"time"

	"github.com/infergate/infergate/spec"
)

// TestEngineScrapeSharedByRules: rules naming one engine share its scrape
// and each sees the signal in its own /status; removing one leaves the
// scrape to the others, removing the last stops it.
func TestEngineScrapeSharedByRules(t *testing.T) {
	body, err := os.ReadFile("../enginestats/testdata/vllm-0.10.txt")
	if err != nil {
		t.Fatal(err)
	}
	rt, _ := newTestRuntime(t, engineOptions())
	e := metricsEngine(t, "/metrics", body, false)
	var rules []*spec.Rule
	for range 3 {
		r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, srvAddr(e), 1))
		r.EngineMetricsPath = "/metrics"
		if err := rt.Install(nil, r); err != nil {
			t.Fatal(err)
		}
		rules = append(rules, r)
	}
	if n := rt.es.Targets(); n != 1 {
		t.Fatalf("distinct scrapes for 3 rules on one engine = %d, want 1", n)
	}
	valid := func(r *spec.Rule) bool {
		st, _ := rt.Status(r.Key)
		es := st.Endpoints[r.Endpoints[0].ID].Engine
		return es != nil && es.Valid && es.Waiting == 5
	}
	for _, r := range rules {
		waitFor(t, 5*time.Second, "every rule's signal", func() bool { return valid(r) })
	}
	rt.Remove(rules[0])
	if n := rt.es.Targets(); n != 1 {
		t.Fatalf("distinct scrapes after removing one rule = %d, want 1", n)
	}
	time.Sleep(engineOptions().Engine.StaleAfter) // the remaining rules' signals stay fresh
	for _, r := range rules[1:] {
		if !valid(r) {
			t.Errorf("rule %s lost its signal when another rule left", r.Key)
		}
	}
	rt.Remove(rules[1])
	rt.Remove(rules[2])
	if n := rt.es.Targets(); n != 0 {
		t.Fatalf("distinct scrapes after removing every rule = %d, want 0", n)
	}
}
