package ladder

import (
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/spec"
)

func TestPowerOfTwo(t *testing.T) {
	cands := []Candidate{{ID: "a", Load: 5}, {ID: "b", Load: 1}, {ID: "c", Load: 5}}
	tests := []struct {
		name  string
		draws []int // what intn returns, in order
		want  int
	}{
		{"second less loaded", []int{0, 0}, 1},  // a vs b (j=0 → skips i → 1)
		{"first less loaded", []int{1, 1}, 1},   // b vs c
		{"tie keeps the first", []int{0, 1}, 0}, // a vs c
		{"tie keeps the first, reversed", []int{2, 0}, 2},
	}
	for _, tc := range tests {
		k := 0
		intn := func(n int) int { v := tc.draws[k]; k++; return v % n }
		if got := powerOfTwo(cands, intn); got != tc.want {
			t.Errorf("%s: got %d, want %d", tc.name, got, tc.want)
		}
	}
	if got := powerOfTwo(cands[:1], nil); got != 0 {
		t.Errorf("one candidate: got %d", got)
	}
}

// TestLadderPolicies: each leg follows its own policy when no affinity tier
// decides, with its own rotation, and the decode step names its policy.
func TestLadderPolicies(t *testing.T) {
	prefills := []Candidate{{ID: "p0", Index: 0, Load: 0}, {ID: "p1", Index: 1, Load: 9}, {ID: "p2", Index: 2, Load: 9}}
	decodes := []Candidate{{ID: "d0", Index: 3, Load: 9}, {ID: "d1", Index: 4, Load: 0}}
	tests := []struct {
		name            string
		prefill, decode spec.Policy
		wantP, wantD    string // choices over 4 requests
		decodeReason    string
	}{
		{"least load (default)", "", "", "p0,p0,p0,p0", "d1,d1,d1,d1", ReasonLeastLoaded},
		{"round robin both", spec.PolicyRoundRobin, spec.PolicyRoundRobin, "p0,p1,p2,p0", "d0,d1,d0,d1", ReasonRoundRobin},
		{"round robin prefill, least load decode", spec.PolicyRoundRobin, spec.PolicyLeastLoad, "p0,p1,p2,p0", "d1,d1,d1,d1", ReasonLeastLoaded},
		{"cache aware prefill chooses by load", spec.PolicyCacheAware, "", "p0,p0,p0,p0", "d1,d1,d1,d1", ReasonLeastLoaded},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := New(nil).WithPolicies(tc.prefill, tc.decode)
			var ps, ds []string
			for range 4 {
				tr, ok := l.SelectPair(&Facts{Now: time.Now()}, prefills, decodes)
				if !ok {
					t.Fatal("no pair")
				}
				ps, ds = append(ps, tr.Prefill.ID), append(ds, tr.Decode.ID)
				last := tr.Steps[len(tr.Steps)-1]
				if last.Tier != TierDecode || last.Reason != tc.decodeReason {
					t.Errorf("decode step %+v, want reason %s", last, tc.decodeReason)
				}
			}
			if got := strings.Join(ps, ","); got != tc.wantP {
				t.Errorf("prefills %s, want %s", got, tc.wantP)
			}
			if got := strings.Join(ds, ","); got != tc.wantD {
				t.Errorf("decodes %s, want %s", got, tc.wantD)
			}
		})
	}
}

// TestLadderPowerOfTwoSpreads: power-of-two never picks the most loaded of
// three when the other two are idle (it always compares two).
func TestLadderPowerOfTwoSpreads(t *testing.T) {
	l := New(nil).WithPolicies(spec.PolicyPowerOfTwo, spec.PolicyPowerOfTwo)
	prefills := []Candidate{{ID: "p0", Load: 0}, {ID: "p1", Load: 0}, {ID: "busy", Load: 50}}
	decodes := []Candidate{{ID: "d0", Load: 0}, {ID: "busy", Load: 50}}
	seen := map[string]int{}
	for range 200 {
		tr, _ := l.SelectPair(&Facts{Now: time.Now()}, prefills, decodes)
		seen[tr.Prefill.ID]++
		if tr.Decode.ID != "d0" {
			t.Fatalf("decode %s chosen over an idle one", tr.Decode.ID)
		}
	}
	if seen["busy"] != 0 || seen["p0"] == 0 || seen["p1"] == 0 {
		t.Errorf("prefill choices %v: want both idle ones, never the busy one", seen)
	}
}
