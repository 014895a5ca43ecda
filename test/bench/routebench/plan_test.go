package main

import (
	"io"
	"slices"
	"strings"
	"testing"
)

// TestSameRun: the noid variant's round-robin (and ideal) run is the
// multi-turn one at the same load and rate, recorded under its own name;
// an arm that reads the header, another load or rate, or a workload with
// no twin is measured.
func TestSameRun(t *testing.T) {
	base := func() *bench {
		return &bench{report: io.Discard, runs: []*runSummary{
			{Workload: "multi-turn", Arm: armRR, Load: 0.7, Rate: 10},
			{Workload: "multi-turn", Arm: armKV, Load: 0.7, Rate: 10},
			{Workload: "multi-turn", Arm: armIdeal, Load: 0.7, Rate: 10},
		}}
	}
	for _, tc := range []struct {
		name, workload, arm string
		load, rate          float64
		reused              bool
	}{
		{"noid rr", "multi-turn-noid", armRR, 0.7, 10, true},
		{"noid ideal", "multi-turn-noid", armIdeal, 0.7, 10, true},
		{"noid kv reads the header", "multi-turn-noid", armKV, 0.7, 10, false},
		{"noid prefix reads the header", "multi-turn-noid", armPrefix, 0.7, 10, false},
		{"another load", "multi-turn-noid", armRR, 1.5, 15, false},
		{"another rate", "multi-turn-noid", armRR, 0.7, 11, false},
		{"no twin", "trace", armRR, 0.7, 10, false},
	} {
		b := base()
		s := b.sameRun(tc.workload, tc.arm, tc.load, tc.rate)
		if (s != nil) != tc.reused {
			t.Errorf("%s: reused %v, want %v", tc.name, s != nil, tc.reused)
			continue
		}
		if s == nil {
			continue
		}
		if s.Workload != tc.workload || s.SameAs != "multi-turn" || s.Arm != tc.arm || b.runs[len(b.runs)-1] != s {
			t.Errorf("%s: recorded %+v, want it under %s, SameAs multi-turn, last of the runs", tc.name, *s, tc.workload)
		}
		if b.runs[0].Workload != "multi-turn" || b.runs[0].SameAs != "" {
			t.Errorf("%s: the measured run was changed: %+v", tc.name, *b.runs[0])
		}
	}
}

// TestCPUPairsSkipSameRun: a reused round-robin run is not paired with a kv
// run for the CPU ratio: it was measured next to other runs, and the ratio
// compares adjacent ones.
func TestCPUPairsSkipSameRun(t *testing.T) {
	runs := []*runSummary{
		{Workload: "multi-turn", Arm: armRR, Load: 0.7, CPUPerReqMs: 1, CPUGrossPerReqMs: 1},
		{Workload: "multi-turn", Arm: armKV, Load: 0.7, CPUPerReqMs: 1.2, CPUGrossPerReqMs: 1.2},
		{Workload: "multi-turn-noid", Arm: armRR, Load: 0.7, CPUPerReqMs: 1, CPUGrossPerReqMs: 1, SameAs: "multi-turn"},
		{Workload: "multi-turn-noid", Arm: armKV, Load: 0.7, CPUPerReqMs: 1.1, CPUGrossPerReqMs: 1.1},
	}
	got := cpuPairs(runs, armRR)
	if len(got) != 1 || got[0].name != "multi-turn 70%" {
		t.Fatalf("pairs %+v, want only multi-turn 70%%", got)
	}
}

// TestPlans: what each mode runs. The short shared prefix has no ideal
// arm, the full trace has none (a pinned Zipf trace overloads its hot
// engines), and the full noid variant keeps its rr row (taken from the
// multi-turn run).
func TestPlans(t *testing.T) {
	arms := func(c config, w string, load float64) []string {
		for _, la := range c.planFor(w).loads {
			if la.frac == load {
				return la.arms
			}
		}
		return nil
	}
	full, short := config{}, config{short: true}
	for _, tc := range []struct {
		name string
		c    config
		w    string
		load float64
		want []string
	}{
		{"short shared prefix 70%", short, "shared-prefix", 0.7, []string{armRR, armKV, armPrefix}},
		{"short shared prefix 150%", short, "shared-prefix", 1.5, []string{armRR, armKV}},
		{"short multi-turn", short, "multi-turn", 0.5, []string{armRR, armKV}},
		{"full shared prefix 70%", full, "shared-prefix", 0.7, []string{armRR, armKV, armLeast, armPrefix, armIdeal}},
		{"full multi-turn 70%", full, "multi-turn", 0.7, []string{armRR, armKV, armPrefix, armIdeal}},
		{"full trace 70%", full, "trace", 0.7, []string{armRR, armKV, armPrefix}},
		{"full trace 150%", full, "trace", 1.5, []string{armRR, armKV}},
		{"full noid", full, "multi-turn-noid", 0.7, []string{armRR, armKV, armPrefix}},
	} {
		if got := arms(tc.c, tc.w, tc.load); !slices.Equal(got, tc.want) {
			t.Errorf("%s: arms %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestRampNext: the ramp climbs while its steps pass and stops at the first
// failure, except that a failing first step is followed once by the step
// below it, so a high first step still ends on a measured rate.
func TestRampNext(t *testing.T) {
	full := []float64{1.25, 1.7, 2.3}
	for _, tc := range []struct {
		name   string
		steps  []float64
		below  float64
		passed []bool
		next   float64
		more   bool
	}{
		{"first", full, 0.9, nil, 1.25, true},
		{"climbs", full, 0.9, []bool{true}, 1.7, true},
		{"climbs again", full, 0.9, []bool{true, true}, 2.3, true},
		{"all passed", full, 0.9, []bool{true, true, true}, 0, false},
		{"stops at a failure", full, 0.9, []bool{true, false}, 0, false},
		{"first failed: below", full, 0.9, []bool{false}, 0.9, true},
		{"below passed: over", full, 0.9, []bool{false, true}, 0, false},
		{"below failed: over", full, 0.9, []bool{false, false}, 0, false},
		{"first failed, no below", []float64{1.4}, 0, []bool{false}, 0, false},
		{"below not lower", full, 1.5, []bool{false}, 0, false},
		{"one step passed", []float64{1.4}, 0, []bool{true}, 0, false},
	} {
		next, more := rampNext(tc.steps, tc.below, tc.passed)
		if more != tc.more || (more && next != tc.next) {
			t.Errorf("%s: (%v, %v), want (%v, %v)", tc.name, next, more, tc.next, tc.more)
		}
	}
}

// TestTableSameRun: in a workload's table a reused round-robin row says so,
// and the kv row's cpu/base is not computed against it: the CPU ratio
// compares adjacent runs (cpuPairs), and the reused one ran beside another
// workload's. Its TTFT ratios stay: every arm of a load runs in turn anyway.
func TestTableSameRun(t *testing.T) {
	var out strings.Builder
	b := &bench{report: &out, baseArm: armRR}
	rows := []*runSummary{
		{Workload: "multi-turn-noid", Arm: armRR, Load: 0.7, N: 50, TTFT: pcts{1, 1, 1}, CPUPerReqMs: 1, SameAs: "multi-turn"},
		{Workload: "multi-turn-noid", Arm: armKV, Load: 0.7, N: 50, TTFT: pcts{2, 2, 2}, CPUPerReqMs: 3},
	}
	b.table("multi-turn-noid", 10, rows)
	var kv string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.Contains(l, " "+armKV+" ") && strings.Contains(l, "|") && kv == "" {
			kv = l // the table's row, not the first-sight line after it
		}
	}
	if kv == "" {
		t.Fatalf("no kv row in\n%s", out.String())
	}
	if !strings.HasSuffix(strings.TrimSpace(kv), "—") || strings.Contains(kv, "3.00×") {
		t.Errorf("kv row's cpu/base against the reused rr row: %q", kv)
	}
	if !strings.Contains(kv, "2.00×") {
		t.Errorf("kv row lost its TTFT ratio: %q", kv)
	}
	if !strings.Contains(out.String(), "the multi-turn run") {
		t.Errorf("the reused rr row is not labelled:\n%s", out.String())
	}
}
