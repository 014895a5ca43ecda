package datapath

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/pdfake"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/spec"
)

// TestMooncakeEngineIDLearned: a vLLM Mooncake prefill without a
// kv_engine_id label has its engine id read from its bootstrap server's
// /query; once read, requests run both legs and the decode names the id
// (before, the decode ran alone: mooncake_engine_id_unknown).
func TestMooncakeEngineIDLearned(t *testing.T) {
	pre, dec := startMooncakeFake(t, "127.0.0.20:0", pdfake.Prefill, 0), startMooncakeFake(t, "127.0.0.30:0", pdfake.Decode, 0)
	pe := pre.Endpoint()
	wantID := pe.Labels["kv_engine_id"]
	pe.Labels = nil // the operator did not configure it
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, pe, dec.Endpoint())
	r.Name, r.Engine, r.PD = "pd-mooncake", spec.EngineVLLM, &spec.PD{SessionTTL: time.Minute}
	rt := newPDTestRuntime(t)
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	body := `{"model":"fake-model","prompt":"hello there","max_tokens":3}`
	deadline := time.Now().Add(5 * time.Second)
	for len(pre.Records()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no request reached the prefill: the engine id was never learned")
		}
		if res := post(t, testClient(), ruleURL(r)+pathCompletions, body); res.status != http.StatusOK {
			t.Fatalf("%d %s", res.status, res.body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	recs := dec.Records()
	var b struct {
		KV struct {
			RemoteEngineID string `json:"remote_engine_id"`
		} `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(recs[len(recs)-1].Body, &b); err != nil {
		t.Fatal(err)
	}
	if b.KV.RemoteEngineID != wantID {
		t.Errorf("decode leg names engine %q, want the prefill's %q", b.KV.RemoteEngineID, wantID)
	}
	for _, e := range []*pdfake.Engine{pre, dec} {
		for _, rec := range e.Records() {
			if rec.Violation != "" {
				t.Errorf("violation %q", rec.Violation)
			}
		}
	}
}

// startMooncakeFake starts a vLLM Mooncake fake engine (dpSize > 1: that
// many data-parallel ranks), closed when the test ends.
func startMooncakeFake(t *testing.T, addr string, role pdfake.Role, dpSize int) *pdfake.Engine {
	t.Helper()
	cfg := pdfake.DefaultConfig(pdfake.VLLM, role)
	cfg.Addr, cfg.Connector, cfg.DPSize = addr, pdfake.ConnectorMooncake, dpSize
	e, err := pdfake.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// newPDTestRuntime is a runtime with the P/D test options, closed when the
// test ends and checked to leave no goroutine behind (cleanups run
// last-first: made before the engines, its check runs after they closed).
func newPDTestRuntime(t *testing.T) *Runtime {
	t.Helper()
	rt := NewWithMetrics(pdTestOptions(), metrics.New(), nil)
	closeAtEnd(t, rt)
	return rt
}
