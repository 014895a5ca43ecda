package datapath

import (
	"net/http"
	"testing"

	"github.com/infergate/infergate/internal/fakeengine"
	"github.com/infergate/infergate/spec"
)

// TestPDDecodeUnreachableServedByRole0: when the chosen decode is dead
// (its connection refused) and no other decode is left, a role-0 endpoint
// serves the request at once instead of 503 while the decode's breaker is
// still counting; the dead decode's connect failures are still counted.
func TestPDDecodeUnreachableServedByRole0(t *testing.T) {
	whole := startEngine(t, "role0")
	f := newPDFleet(t, pdTestOptions(), spec.EngineVLLM, 1, 1, func(r *spec.Rule) {
		r.Endpoints = append(r.Endpoints, epFor(t, whole.Addr(), 1))
	})
	_ = f.decodes[0].Close()
	c := testClient()
	for i := range 4 {
		res := post(t, c, f.url(pathCompletions), pdBody(pathCompletions, false, ""))
		if res.status != http.StatusOK || res.header.Get(fakeengine.HeaderEngine) != "role0" {
			t.Fatalf("request %d: %d %s", i, res.status, res.body)
		}
	}
	waitCounter(t, f.reg, "loxilb_pd_fallback_to_normal_total", nil, 4)
	if n := counterSum(t, f.reg, "infergate_ladder_decisions_total", map[string]string{"reason": reasonDecodeUnreachable}); n < 1 {
		t.Errorf("no decode_unreachable fallback counted")
	}
	if n := counterSum(t, f.reg, "infergate_pd_leg_requests_total", map[string]string{"phase": "decode", "status": legStatusNone}); n < 1 {
		t.Errorf("the dead decode's failed legs were not counted")
	}
}
