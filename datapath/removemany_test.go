package datapath

import (
	"strconv"
	"testing"

	"github.com/infergate/infergate/spec"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// seriesOf counts the series of every rule-labelled family whose rule
// label is label.
func seriesOf(t *testing.T, rt *Runtime, label string) int {
	t.Helper()
	n := 0
	for _, v := range rt.ruleVecs() {
		ch := make(chan prometheus.Metric, 64)
		go func() { v.Collect(ch); close(ch) }()
		for m := range ch {
			var d dto.Metric
			if err := m.Write(&d); err != nil {
				t.Fatal(err)
			}
			for _, p := range d.Label {
				if p.GetName() == "rule" && p.GetValue() == label {
					n++
				}
			}
		}
	}
	return n
}

// TestRemoveManyDropsExactlyTheirSeries: a batch removal stops serving
// each rule and drops the series of those rules, and only theirs, as
// removing them one by one does.
func TestRemoveManyDropsExactlyTheirSeries(t *testing.T) {
	rt, _ := newTestRuntime(t, testOptions())
	eng := startEngine(t, "e1")
	var rs []*spec.Rule
	for i := range 4 {
		r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, eng.Addr(), 1))
		r.Name = "batch-" + strconv.Itoa(i)
		if err := rt.Install(nil, r); err != nil {
			t.Fatal(err)
		}
		if res := post(t, testClient(), ruleURL(r)+"/v1/completions", completionBody); res.status != 200 {
			t.Fatalf("rule %s: %d", r.Name, res.status)
		}
		rs = append(rs, r)
	}
	for _, r := range rs {
		if seriesOf(t, rt, r.Name) == 0 {
			t.Fatalf("rule %s has no series before the removal", r.Name)
		}
	}
	rt.RemoveMany(rs[:3])
	for i, r := range rs {
		_, served := rt.Status(r.Key)
		n := seriesOf(t, rt, r.Name)
		if removed := i < 3; removed && (served || n != 0) {
			t.Errorf("removed rule %s: served %v, %d series left", r.Name, served, n)
		} else if !removed && (!served || n == 0) {
			t.Errorf("kept rule %s: served %v, %d series", r.Name, served, n)
		}
	}
}
