package datapath

import (
	"net/http"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/pdfake"
	"github.com/infergate/infergate/spec"
)

// TestPDOriginErrStreak: the P/D breaker opens on LoxiLB's streak (3 by
// default, independent of the single-pool streak) and never with 0.
func TestPDOriginErrStreak(t *testing.T) {
	if DefaultOptions().BreakerPD5xxStreak != 3 {
		t.Fatalf("default P/D 5xx streak %d, want LoxiLB's 3", DefaultOptions().BreakerPD5xxStreak)
	}
	tests := []struct {
		name     string
		streak   int
		failures int
		open     bool
	}{
		{"default opens at 3", 3, 3, true},
		{"below the streak stays closed", 3, 2, false},
		{"0 disables", 0, 6, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := pdTestOptions()
			o.Breaker5xxStreak = 9 // the single-pool streak does not apply to P/D
			o.BreakerPD5xxStreak = tc.streak
			o.BreakerOpenFor = time.Minute
			f := newPDFleet(t, o, spec.EngineVLLM, 1, 1)
			f.prefills[0].Inject(pdfake.Fault500, tc.failures)
			id := f.prefills[0].Endpoint().ID
			for i := range tc.failures {
				if res := post(t, testClient(), f.url(pathCompletions), pdBody(pathCompletions, false, "")); res.status != http.StatusOK {
					t.Fatalf("request %d: %d %s", i, res.status, res.body)
				}
			}
			if tc.open {
				waitFor(t, 5*time.Second, "prefill breaker open", func() bool {
					st, _ := f.rt.Status(f.rule.Key)
					return st.Endpoints[id].Breaker == "open"
				})
				return
			}
			st, _ := f.rt.Status(f.rule.Key)
			if b := st.Endpoints[id].Breaker; b != "closed" {
				t.Fatalf("breaker %s after %d failures with streak %d, want closed", b, tc.failures, tc.streak)
			}
		})
	}
}
