package datapath

import (
	"net/http"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/pdfake"
	"github.com/infergate/infergate/spec"
)

// TestMooncakeDPRanksLearned: the engines of a data-parallel Mooncake
// prefill are read from its bootstrap /query with its engine id, and every
// request is pinned to one rank whose engine the decode names: the fake
// decode's pull asks that engine's worker and finds the transfer (without
// the ranks the prefill's own balancer spreads the legs and the decode,
// naming rank 0, misses most).
func TestMooncakeDPRanksLearned(t *testing.T) {
	pre, dec := startMooncakeFake(t, "127.0.0.21:0", pdfake.Prefill, 4), startMooncakeFake(t, "127.0.0.31:0", pdfake.Decode, 4)
	pe := pre.Endpoint()
	pe.Labels = nil
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, pe, dec.Endpoint())
	r.Name, r.Engine, r.PD = "pd-mooncake-dp", spec.EngineVLLM, &spec.PD{SessionTTL: time.Minute}
	rt := newPDTestRuntime(t)
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	body := `{"model":"fake-model","prompt":"hello there","max_tokens":3}`
	deadline := time.Now().Add(5 * time.Second)
	for len(pre.Records()) == 0 { // until the engines are read
		if time.Now().After(deadline) {
			t.Fatal("no request reached the prefill: its engines were never read")
		}
		if res := post(t, testClient(), ruleURL(r)+pathCompletions, body); res.status != http.StatusOK {
			t.Fatalf("%d %s", res.status, res.body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for range 8 {
		if res := post(t, testClient(), ruleURL(r)+pathCompletions, body); res.status != http.StatusOK {
			t.Fatalf("%d %s", res.status, res.body)
		}
	}
	recs := pre.Records()
	if len(recs) < 8 {
		t.Fatalf("prefill got %d legs", len(recs))
	}
	for _, rec := range recs {
		if rec.Header.Get("X-data-parallel-rank") == "" {
			t.Errorf("prefill leg not pinned to a rank: %s", rec.Body)
		}
	}
	for _, e := range []*pdfake.Engine{pre, dec} {
		for _, rec := range e.Records() {
			if rec.Violation != "" {
				t.Errorf("violation %q", rec.Violation)
			}
		}
	}
}
