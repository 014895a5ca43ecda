package pdfake

import (
	"encoding/json"
	"net/http"
	"testing"
)

// TestModelsEndpoint: every dialect lists its model on GET /v1/models, so
// `infergate validate` checks model readiness (not only /health) and probes
// with the served model name.
func TestModelsEndpoint(t *testing.T) {
	for _, d := range []Dialect{VLLM, SGLang, TRTLLM} {
		t.Run(string(d), func(t *testing.T) {
			cfg := DefaultConfig(d, Decode)
			cfg.Model = "m-" + string(d)
			e := startT(t, cfg)
			resp, err := http.Get("http://" + e.AddrPort().String() + "/v1/models")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var got modelList
			if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d, decode %v", resp.StatusCode, err)
			}
			if len(got.Data) != 1 || got.Data[0].ID != cfg.Model || got.Object != "list" {
				t.Errorf("models = %+v, want one %q", got, cfg.Model)
			}
		})
	}
}
