package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/fakeengine"
	"github.com/infergate/infergate/internal/pdfake"
)

// Addresses of the surface end-to-end test.
const (
	surfSingleVIP  = "127.0.0.71"
	surfPDVIP      = "127.0.0.72"
	surfPrefillIP  = "127.0.0.73"
	surfDecodeIP   = "127.0.0.74"
	surfUploadSize = 8<<20 + 5
)

// TestSurfaceThroughDaemon drives the built `infergate serve` with a
// single-pool rule (in front of the fake engine) and an SGLang P/D rule
// (in front of recording fake prefill/decode engines), with requests
// shaped like the OpenAI SDK's: the single pool forwards the Responses
// stream, embeddings and a chunked multipart upload; a WebSocket upgrade
// is refused; the P/D rule sends /tokenize to exactly one prefill and fans
// n=3 out into three rooms merged in order, streaming included.
func TestSurfaceThroughDaemon(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs a daemon")
	}
	bin := cliBuild(t)
	d := cliStartDaemon(t, bin, t.TempDir())

	eng, err := fakeengine.Start(fakeengine.Options{Addr: "127.0.0.75:0", Name: "single", Tokens: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	pre := surfStartSGLang(t, pdfake.Prefill, surfPrefillIP)
	dec := surfStartSGLang(t, pdfake.Decode, surfDecodeIP)

	singlePort, pdPort := cliFreePort(t), cliFreePort(t)
	rules := []map[string]any{
		{
			"serviceArguments": map[string]any{"externalIP": surfSingleVIP, "port": singlePort, "protocol": "tcp", "sel": 0, "mode": 4, "name": "e2e-surface"},
			"endpoints":        []map[string]any{{"endpointIP": "127.0.0.75", "targetPort": eng.Port(), "weight": 1}},
		},
		{
			"serviceArguments": map[string]any{
				"externalIP": surfPDVIP, "port": pdPort, "protocol": "tcp", "sel": 0, "mode": 4, "name": "e2e-surface-pd",
				"pd_disagg_mode": true, "kvEngineType": "sglang", "pdBootstrapPort": pre.BootstrapPort(),
			},
			"endpoints": []map[string]any{
				{"endpointIP": surfPrefillIP, "targetPort": pre.AddrPort().Port(), "weight": 1, "ep_role": 1},
				{"endpointIP": surfDecodeIP, "targetPort": dec.AddrPort().Port(), "weight": 1, "ep_role": 2},
			},
		},
	}
	for _, r := range rules {
		if st := pdJSON(t, http.MethodPost, d.URL+"/netlox/v1/config/loadbalancer", r, nil); st != http.StatusOK && st != http.StatusCreated {
			t.Fatalf("create rule: %d", st)
		}
	}
	single := fmt.Sprintf("http://%s:%d", surfSingleVIP, singlePort)
	pd := fmt.Sprintf("http://%s:%d", surfPDVIP, pdPort)
	eventually(t, pdWaitTimeout, "both VIPs answer", func() bool {
		for _, u := range []string{single + "/health", pd + "/health"} {
			resp, err := pdHTTP.Get(u)
			if err != nil {
				return false
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return false
			}
		}
		return true
	})

	// Single pool: the Responses stream and embeddings come back as sent.
	status, hdr, body := surfPost(t, single+"/v1/responses", "application/json", `{"model":"fake-model","input":"hi","stream":true}`)
	if status != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/event-stream") || !strings.Contains(body, "event: response.completed") {
		t.Fatalf("single /v1/responses: %d %v %s", status, hdr, body)
	}
	if status, _, body = surfPost(t, single+"/v1/embeddings", "application/json", `{"model":"fake-model","input":"hi"}`); status != 200 || !strings.Contains(body, `"embedding"`) {
		t.Fatalf("single /v1/embeddings: %d %s", status, body)
	}
	// A chunked multipart upload streams through whole.
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		_ = mw.WriteField("model", "whisper-1")
		fw, _ := mw.CreateFormFile("file", "a.wav")
		chunk := make([]byte, 64<<10)
		for left := surfUploadSize; left > 0; left -= min(left, len(chunk)) {
			if _, err := fw.Write(chunk[:min(left, len(chunk))]); err != nil {
				pw.CloseWithError(err)
				return
			}
		}
		pw.CloseWithError(mw.Close())
	}()
	status, hdr, body = surfPost(t, single+"/v1/audio/transcriptions", mw.FormDataContentType(), pr)
	if status != 200 || hdr.Get(fakeengine.HeaderUploadBytes) != strconv.Itoa(surfUploadSize) {
		t.Fatalf("upload: %d %v %s", status, hdr, body)
	}
	// WebSocket upgrades are refused with a code.
	req, _ := http.NewRequest(http.MethodGet, single+"/v1/realtime", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	resp, err := pdHTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotImplemented || resp.Header.Get("X-Infergate-Error") != "upgrade_not_supported" {
		t.Fatalf("websocket: %d %v", resp.StatusCode, resp.Header)
	}

	// P/D: /tokenize lands on exactly one endpoint, the prefill.
	if status, _, body = surfPost(t, pd+"/tokenize", "application/json", `{"model":"fake-model","prompt":"hi"}`); status != 200 || !strings.Contains(body, `"tokens"`) {
		t.Fatalf("pd /tokenize: %d %s", status, body)
	}
	if got := surfCount(pre.SideRequests(), "/tokenize"); got != 1 {
		t.Fatalf("prefill got %d /tokenize calls, want 1", got)
	}
	if got := surfCount(dec.SideRequests(), "/tokenize"); got != 0 {
		t.Fatalf("decode got %d /tokenize calls, want 0", got)
	}
	// P/D SGLang n=3, streaming: three rooms, choices 0..2, one [DONE].
	status, _, body = surfPost(t, pd+"/v1/chat/completions", "application/json",
		`{"model":"fake-model","messages":[{"role":"user","content":"hi"}],"n":3,"stream":true}`)
	if status != 200 || strings.Count(body, "[DONE]") != 1 {
		t.Fatalf("pd n=3 stream: %d %s", status, body)
	}
	seen := map[int]bool{}
	for _, line := range strings.Split(body, "\n") {
		var v struct {
			Choices []struct {
				Index int `json:"index"`
			} `json:"choices"`
		}
		if p, ok := strings.CutPrefix(line, "data: "); ok && json.Unmarshal([]byte(p), &v) == nil {
			for _, c := range v.Choices {
				seen[c.Index] = true
			}
		}
	}
	if len(seen) != 3 || !seen[0] || !seen[1] || !seen[2] {
		t.Fatalf("choice indexes %v, want 0..2: %s", seen, body)
	}
	if got := len(dec.Records()); got != 3 {
		t.Fatalf("decode got %d dispatches, want 3 (one per sample)", got)
	}
}

func surfStartSGLang(t *testing.T, role pdfake.Role, ip string) *pdfake.Engine {
	t.Helper()
	cfg := pdfake.DefaultConfig(pdfake.SGLang, role)
	cfg.Addr = ip + ":0"
	cfg.StreamChunks = 3
	e, err := pdfake.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// surfPost posts body (a string or a reader) and returns the answer.
func surfPost(t *testing.T, url, ct string, body any) (int, http.Header, string) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case string:
		rd = strings.NewReader(b)
	case io.Reader:
		rd = b
	}
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Post(url, ct, rd)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func surfCount(recs []pdfake.Record, path string) int {
	n := 0
	for _, r := range recs {
		if r.Path == path {
			n++
		}
	}
	return n
}
