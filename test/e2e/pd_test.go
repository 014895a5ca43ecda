package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/pdfake"
)

// Bounds and addresses of the P/D end-to-end test.
const (
	pdVIP          = "127.0.0.61"
	pdPrefillIP    = "127.0.0.62"
	pdDecodeIP     = "127.0.0.63"
	pdWaitTimeout  = 20 * time.Second
	pdPollInterval = 20 * time.Millisecond
)

// pdHTTP is a client bounded in time for every call of the test.
var pdHTTP = &http.Client{Timeout: 15 * time.Second}

func pdStartFake(t *testing.T, role pdfake.Role, ip string) *pdfake.Engine {
	t.Helper()
	cfg := pdfake.DefaultConfig(pdfake.VLLM, role)
	cfg.Addr = ip + ":0"
	e, err := pdfake.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func pdJSON(t *testing.T, method, url string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := pdHTTP.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, url, err, b)
		}
	}
	return resp.StatusCode
}

// TestPDThroughDaemon drives `infergate serve` with a vLLM 1P1D rule created
// over the API against recording fake engines: readiness flips with the
// probes, streaming and non-streaming requests run both legs, the per-leg
// metrics prove each role served, Explain answers, and losing the decode
// makes the rule not ready and requests 503 pd_pool_unavailable.
func TestPDThroughDaemon(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs a daemon")
	}
	bin := cliBuild(t)
	d := cliStartDaemon(t, bin, t.TempDir())
	pre := pdStartFake(t, pdfake.Prefill, pdPrefillIP)
	dec := pdStartFake(t, pdfake.Decode, pdDecodeIP)
	port := cliFreePort(t)
	rule := map[string]any{
		"serviceArguments": map[string]any{
			"externalIP": pdVIP, "port": port, "protocol": "tcp", "sel": 0, "mode": 4, "name": "e2e-pd",
			"pd_disagg_mode": true, "kvEngineType": "vllm", "sse_mode": true,
			"probetype": "http", "probereq": "/health",
		},
		"endpoints": []map[string]any{
			{"endpointIP": pdPrefillIP, "targetPort": pre.AddrPort().Port(), "weight": 1, "ep_role": 1},
			{"endpointIP": pdDecodeIP, "targetPort": dec.AddrPort().Port(), "weight": 1, "ep_role": 2},
		},
	}
	if st := pdJSON(t, http.MethodPost, d.URL+"/netlox/v1/config/loadbalancer", rule, nil); st != http.StatusOK && st != http.StatusCreated {
		t.Fatalf("create rule: %d", st)
	}
	keyURL := fmt.Sprintf("%s/netlox/v1/config/loadbalancer/externalipaddress/%s/port/%d/protocol/tcp", d.URL, pdVIP, port)
	var status struct {
		Ready  bool   `json:"ready"`
		Reason string `json:"reason"`
	}
	waitStatus := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(pdWaitTimeout)
		for {
			pdJSON(t, http.MethodGet, keyURL+"/status", nil, &status)
			if cond() {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; status %+v", what, status)
			}
			time.Sleep(pdPollInterval)
		}
	}
	waitStatus("ready", func() bool { return status.Ready })

	vip := fmt.Sprintf("http://%s:%d/v1/completions", pdVIP, port)
	for _, stream := range []bool{false, true} {
		body := fmt.Sprintf(`{"model":"fake-model","prompt":"hello","max_tokens":3,"stream":%v}`, stream)
		resp, err := pdHTTP.Post(vip, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("stream=%v: %d %s", stream, resp.StatusCode, b)
		}
		if stream != strings.Contains(string(b), "data: [DONE]") {
			t.Errorf("stream=%v answer: %q", stream, b)
		}
	}
	for name, e := range map[string]*pdfake.Engine{"prefill": pre, "decode": dec} {
		recs := e.Records()
		if len(recs) != 2 {
			t.Errorf("%s got %d requests, want 2", name, len(recs))
		}
		for _, r := range recs {
			if r.Violation != "" {
				t.Errorf("%s: protocol violation %q", name, r.Violation)
			}
		}
	}
	// Per-leg metrics name both endpoints (they are counted after the
	// client's answer, so poll).
	deadline := time.Now().Add(pdWaitTimeout)
	for {
		resp, err := pdHTTP.Get(d.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		text := string(b)
		want := []string{
			fmt.Sprintf(`infergate_pd_leg_requests_total{endpoint="%s",phase="prefill",rule="e2e-pd",status="200"} 2`, pre.AddrPort()),
			fmt.Sprintf(`infergate_pd_leg_requests_total{endpoint="%s",phase="decode",rule="e2e-pd",status="200"} 2`, dec.AddrPort()),
			// The request's model: the rule pins none.
			`loxilb_ai_pd_requests_total{model="fake-model",phase="complete",rule="e2e-pd",status="success"} 2`,
		}
		missing := ""
		for _, w := range want {
			if !strings.Contains(text, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics lack %s", missing)
		}
		time.Sleep(pdPollInterval)
	}

	var ex struct {
		Outcome string `json:"outcome"`
		Prefill string `json:"prefill"`
		Decode  string `json:"decode"`
	}
	if st := pdJSON(t, http.MethodPost, keyURL+"/explain", map[string]any{
		"path": "/v1/completions", "body": map[string]any{"model": "fake-model", "prompt": "hello"},
	}, &ex); st != http.StatusOK || ex.Outcome != "pair" || ex.Prefill != pre.AddrPort().String() || ex.Decode != dec.AddrPort().String() {
		t.Errorf("explain: %d %+v", st, ex)
	}

	_ = dec.Close()
	waitStatus("not ready without decode", func() bool { return !status.Ready })
	if status.Reason != "no usable decode endpoint" {
		t.Errorf("reason %q", status.Reason)
	}
	resp, err := pdHTTP.Post(vip, "application/json", strings.NewReader(`{"model":"fake-model","prompt":"hello","max_tokens":3}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("X-Infergate-Error") != "pd_pool_unavailable" {
		t.Errorf("without decode: %d %s", resp.StatusCode, b)
	}
}
