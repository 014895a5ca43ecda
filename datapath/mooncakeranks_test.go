package datapath

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/pdfake"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/spec"
)

// TestMooncakeDPRanksLearned: the engines of a data-parallel Mooncake
// prefill are read from its bootstrap /query with its engine id, and every
// request is pinned to one rank whose engine the decode names: the fake
// decode's pull asks that engine's worker and finds the transfer (without
// the ranks the prefill's own balancer spreads the legs and the decode,
// naming rank 0, misses most).
func TestMooncakeDPRanksLearned(t *testing.T) {
	start := func(addr string, role pdfake.Role) *pdfake.Engine {
		cfg := pdfake.DefaultConfig(pdfake.VLLM, role)
		cfg.Addr, cfg.Connector, cfg.DPSize = addr, pdfake.ConnectorMooncake, 4
		e, err := pdfake.Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		return e
	}
	pre, dec := start("127.0.0.21:0", pdfake.Prefill), start("127.0.0.31:0", pdfake.Decode)
	pe := pre.Endpoint()
	pe.Labels = nil
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, pe, dec.Endpoint())
	r.Name, r.Engine, r.PD = "pd-mooncake-dp", spec.EngineVLLM, &spec.PD{SessionTTL: time.Minute}
	rt := NewWithMetrics(pdTestOptions(), metrics.New(), nil)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rt.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
		assertNoDatapathGoroutines(t)
	})
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
