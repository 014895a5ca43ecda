package pick

import (
	"reflect"
	"testing"
)

// fixed is a picker with a preset answer; dry counts DryPick calls.
type fixed struct {
	name   Name
	idx    int
	reason string
	ok     bool
	dry    int
}

func (f *fixed) Name() Name { return f.name }
func (f *fixed) Pick(*Facts, []Candidate) (int, string, bool) {
	return f.idx, f.reason, f.ok
}
func (f *fixed) DryPick(fa *Facts, c []Candidate) (int, string, bool) {
	f.dry++
	return f.Pick(fa, c)
}

// TestFirst: the first hit wins, every picker that ran leaves a step, and a
// choice outside the candidates is a fall-through.
func TestFirst(t *testing.T) {
	c := cands("p", 0, 0)
	tests := []struct {
		name    string
		pickers []Picker
		want    int
		steps   []Step
	}{
		{name: "none", want: -1},
		{name: "first hit wins", want: 1,
			pickers: []Picker{&fixed{name: "a", reason: "miss"}, &fixed{name: "b", idx: 1, ok: true}, &fixed{name: "c", ok: true}},
			steps:   []Step{{Tier: "a", Reason: "miss"}, {Tier: "b", Hit: true, Choice: "p1"}}},
		{name: "out of range is a fall-through", want: 0,
			pickers: []Picker{&fixed{name: "a", idx: 5, ok: true}, &fixed{name: "b", idx: -1, ok: true}, &fixed{name: "c", ok: true}},
			steps: []Step{{Tier: "a", Reason: ReasonNotChosen}, {Tier: "b", Reason: ReasonNotChosen},
				{Tier: "c", Hit: true, Choice: "p0"}}},
		{name: "all fall through", want: -1,
			pickers: []Picker{&fixed{name: "a", reason: "x"}},
			steps:   []Step{{Tier: "a", Reason: "x"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var steps []Step
			got, ok := First(&Facts{}, c, false, &steps, tt.pickers...)
			if got != tt.want || ok != (tt.want >= 0) || !reflect.DeepEqual(steps, tt.steps) {
				t.Fatalf("First = %d, %v, %+v; want %d, %+v", got, ok, steps, tt.want, tt.steps)
			}
		})
	}
}

// TestFirstDry: a dry run calls DryPick, a real one never does.
func TestFirstDry(t *testing.T) {
	p := &fixed{name: "a", ok: true}
	var steps []Step
	First(&Facts{}, cands("p", 0), false, &steps, p)
	First(&Facts{}, cands("p", 0), true, &steps, p)
	if p.dry != 1 {
		t.Fatalf("DryPick ran %d times, want 1 (the dry run only)", p.dry)
	}
}
