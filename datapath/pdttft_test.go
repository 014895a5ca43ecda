package datapath

import (
	"net/http"
	"testing"

	"github.com/infergate/infergate/internal/pdfake"
	"github.com/infergate/infergate/spec"
)

// TestPDClientTTFT: every successful P/D answer, streamed or not, is one
// infergate_pd_client_ttft_seconds sample under its rule and model; an
// error answer (the decode's 400 relayed) is none.
func TestPDClientTTFT(t *testing.T) {
	f := newPDFleet(t, pdTestOptions(), spec.EngineVLLM, 1, 1)
	c := testClient()
	labels := map[string]string{"rule": f.rule.Name}
	for _, stream := range []bool{false, true} {
		if res := post(t, c, f.url(pathChatCompletions), pdBody(pathChatCompletions, stream, "")); res.status != http.StatusOK {
			t.Fatalf("stream=%v: %d %s", stream, res.status, res.body)
		}
	}
	waitCounter(t, f.reg, "infergate_pd_client_ttft_seconds", labels, 2)
	f.decodes[0].Inject(pdfake.Fault400, 1)
	if res := post(t, c, f.url(pathChatCompletions), pdBody(pathChatCompletions, false, "")); res.status != http.StatusBadRequest {
		t.Fatalf("injected 400: got %d %s", res.status, res.body)
	}
	waitCounter(t, f.reg, "loxilb_ai_pd_requests_total", labels, 3)
	if got := counterSum(t, f.reg, "infergate_pd_client_ttft_seconds", labels); got != 2 {
		t.Errorf("samples after an error answer = %v, want still 2", got)
	}
	if got := counterSum(t, f.reg, "infergate_pd_client_ttft_seconds", map[string]string{"model": ""}); got != 0 {
		t.Errorf("samples without a model label = %v", got)
	}
}
