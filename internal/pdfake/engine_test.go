package pdfake

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

func startT(t *testing.T, cfg Config) *Engine {
	t.Helper()
	e, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func post(t *testing.T, ctx context.Context, e *Engine, path, body string) (int, string, error) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+e.AddrPort().String()+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestEngineProtocolChecks: each fake rejects what its real engine rejects.
func TestEngineProtocolChecks(t *testing.T) {
	tests := []struct {
		name      string
		d         Dialect
		r         Role
		body      string
		status    int
		violation string
	}{
		{"vllm decode with foreign params", VLLM, Decode, `{"prompt":"p","kv_transfer_params":{"do_remote_prefill":true}}`, 400, "decode kv_transfer_params"},
		{"vllm decode without params recomputes", VLLM, Decode, `{"prompt":"p"}`, 200, ""},
		{"vllm prefill without remote decode", VLLM, Prefill, `{"prompt":"p","max_tokens":1}`, 200, "prefill without kv_transfer_params"},
		{"vllm prefill streaming", VLLM, Prefill, `{"prompt":"p","max_tokens":1,"stream":true,"kv_transfer_params":{"do_remote_decode":true}}`, 400, "must not stream"},
		{"trt unknown field", TRTLLM, Prefill, `{"prompt":"p","bootstrap_room":1}`, 400, "extra_forbidden: bootstrap_room"},
		{"trt unknown disagg field", TRTLLM, Prefill, `{"prompt":"p","disaggregated_params":{"request_type":"context_only","x":1}}`, 400, "extra_forbidden: disaggregated_params.x"},
		{"trt generation to context", TRTLLM, Prefill, `{"prompt":"p","disaggregated_params":{"request_type":"generation_only"}}`, 400, "context_only"},
		{"trt context streaming", TRTLLM, Prefill, `{"prompt":"p","stream":true,"disaggregated_params":{"request_type":"context_only"}}`, 400, "cannot stream"},
		{"trt generation forged state", TRTLLM, Decode, `{"prompt":"p","disaggregated_params":{"request_type":"generation_only","ctx_request_id":1,"encoded_opaque_state":"MOCKTRT1:e30="}}`, 400, "opaque state"},
		{"trt standalone", TRTLLM, Decode, `{"prompt":"p"}`, 200, ""},
		{"sglang missing triple", SGLang, Decode, `{"prompt":"p"}`, 400, "TRIPLE-MISSING"},
		{"sglang room out of range", SGLang, Decode, `{"prompt":"p","bootstrap_host":"127.0.0.1","bootstrap_port":1,"bootstrap_room":9223372036854775808}`, 400, "ROOM-RANGE-ERROR"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := startT(t, DefaultConfig(tc.d, tc.r))
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			status, body, err := post(t, ctx, e, "/v1/completions", tc.body)
			if err != nil || status != tc.status {
				t.Fatalf("status %d (%v), want %d: %s", status, err, tc.status, body)
			}
			recs, err := e.WaitDone(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			if v := recs[0].Violation; (tc.violation == "") != (v == "") || !strings.Contains(v, tc.violation) {
				t.Errorf("violation = %q, want containing %q", v, tc.violation)
			}
		})
	}
}

// TestSGLangPrefillBlocksWithoutDecode proves the fake catches a sequential
// gateway: a prefill alone never completes its rendezvous.
func TestSGLangPrefillBlocksWithoutDecode(t *testing.T) {
	cfg := DefaultConfig(SGLang, Prefill)
	cfg.RendezvousTimeout = 200 * time.Millisecond
	e := startT(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	body := `{"prompt":"p","bootstrap_host":"127.0.0.1","bootstrap_port":` + itoa(int(e.BootstrapPort())) + `,"bootstrap_room":7}`
	status, _, err := post(t, ctx, e, "/v1/completions", body)
	if err != nil || status != http.StatusInternalServerError {
		t.Fatalf("lone prefill got %d (%v), want 500 rendezvous timeout", status, err)
	}
	recs, _ := e.WaitDone(ctx, 1)
	if recs[0].Violation != "RENDEZVOUS-TIMEOUT" {
		t.Errorf("violation = %q", recs[0].Violation)
	}
}

// TestFaultsSeenByClient: each injected fault has its wire effect, and a
// hang records the client's close.
func TestFaultsSeenByClient(t *testing.T) {
	tests := []struct {
		f       Fault
		status  int
		wantErr bool
	}{
		{Fault500, 500, false},
		{Fault400, 400, false},
		{FaultDropBeforeFirstByte, 0, true},
		{FaultDropAfterFirstByte, 200, true},
	}
	for _, tc := range tests {
		t.Run(string(tc.f), func(t *testing.T) {
			e := startT(t, DefaultConfig(VLLM, Decode))
			e.Inject(tc.f, 1)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			status, _, err := post(t, ctx, e, "/v1/completions", `{"prompt":"p"}`)
			if status != tc.status || (err != nil) != tc.wantErr {
				t.Errorf("got %d (%v), want %d err=%v", status, err, tc.status, tc.wantErr)
			}
			// The fault is one-shot.
			if status, _, err := post(t, ctx, e, "/v1/completions", `{"prompt":"p"}`); status != 200 || err != nil {
				t.Errorf("second request got %d (%v)", status, err)
			}
		})
	}
	t.Run("hang records the close", func(t *testing.T) {
		e := startT(t, DefaultConfig(VLLM, Decode))
		e.Inject(FaultHang, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		if _, _, err := post(t, ctx, e, "/v1/completions", `{"prompt":"p"}`); err == nil {
			t.Fatal("hang answered")
		}
		wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer wcancel()
		recs, err := e.WaitDone(wctx, 1)
		if err != nil || !recs[0].Cancelled {
			t.Errorf("hang did not record the close: %v %+v", err, recs)
		}
	})
}

func TestRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var out bytes.Buffer
	done := make(chan error, 1)
	cfg := DefaultConfig(TRTLLM, Decode)
	go func() { done <- Run(ctx, cfg, &out) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if !strings.Contains(out.String(), "dialect=trtllm role=decode") {
		t.Errorf("Run printed %q", out.String())
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
