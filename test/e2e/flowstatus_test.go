package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/api"
	"github.com/infergate/infergate/spec"
)

// TestFlowStatusThroughDaemon: with the built binary, a rule whose one
// engine is at its admission window shows the window full and the queue
// (length, oldest wait, sheds) in …/status, `get lb -o wide` and
// `explain`, and both empty once the engine answers.
func TestFlowStatusThroughDaemon(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	release := make(chan struct{})
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[{"text":"ok"}]}`)
	}))
	t.Cleanup(engine.Close)
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()

	bin := cliBuild(t)
	d := cliStartDaemon(t, bin, t.TempDir(), "--flow-queue-length=1", "--flow-max-wait=30s")
	const vip = "127.0.0.1"
	port := cliFreePort(t)
	epHost, epPort, _ := strings.Cut(strings.TrimPrefix(engine.URL, "http://"), ":")
	f := filepath.Join(t.TempDir(), "windowed.yaml")
	doc := fmt.Sprintf(`apiVersion: infergate/v1
kind: Loadbalancer
spec:
  serviceArguments: {externalIP: %s, port: %d, protocol: tcp, mode: 4, name: e2e-window, admission_window: 1}
  endpoints:
    - {endpointIP: %s, targetPort: %s, weight: 1}
`, vip, port, epHost, epPort)
	if err := os.WriteFile(f, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	cliMust(t, bin, d.URL, "apply", "-f", f)
	url := fmt.Sprintf("http://%s:%d/v1/completions", vip, port)
	statusURL := fmt.Sprintf("%s/netlox/v1/config/loadbalancer/externalipaddress/%s/port/%d/protocol/tcp/status", d.URL, vip, port)
	status := func() api.StatusView {
		t.Helper()
		resp, err := http.Get(statusURL)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v api.StatusView
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	epID := fmt.Sprintf("%s:%s", epHost, epPort)
	eventually(t, 10*time.Second, "the rule served", func() bool { return status().Ready })

	hc := &http.Client{Timeout: 60 * time.Second}
	post := func() (int, error) {
		resp, err := hc.Post(url, "application/json", strings.NewReader(`{"model":"m","prompt":"hello","max_tokens":2}`))
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	type answer struct {
		code int
		err  error
	}
	answers := make(chan answer, 2)
	for range 2 { // one holds the window, one queues
		go func() { c, err := post(); answers <- answer{c, err} }()
	}
	var st api.StatusView
	eventually(t, 10*time.Second, "the window full and one request queued", func() bool {
		st = status()
		w := st.Endpoints[epID].Window
		return w != nil && w.Full && st.Queue != nil && st.Queue.Queued == 1
	})
	if code, err := post(); err != nil || code != http.StatusServiceUnavailable {
		t.Fatalf("third request: %d %v, want 503 (queue of 1 full)", code, err)
	}
	st = status()
	if w := st.Endpoints[epID].Window; *w != (spec.WindowStatus{Limit: 1, InFlight: 1, Full: true}) {
		t.Errorf("/status window %+v", w)
	}
	if q := st.Queue; q.Queued != 1 || q.ByClass["standard"] != 1 || q.OldestWaitSec <= 0 || q.Shed["queue_full"] != 1 || q.ShedTotal != 1 {
		t.Errorf("/status queue %+v", q)
	}

	wide := cliMust(t, bin, d.URL, "get", "lb", "-o", "wide")
	for _, want := range []string{"WINDOW", "QUEUE", "1/1,full", "queued=1,oldest=", ",shed=1"} {
		if !strings.Contains(wide, want) {
			t.Errorf("get lb -o wide lacks %q:\n%s", want, wide)
		}
	}
	var ex spec.Explanation
	out := cliMust(t, bin, d.URL, "explain", vip, fmt.Sprintf("--tcp=%d", port), "--prompt", "hello", "--path", "/v1/completions", "-o", "json")
	if err := json.Unmarshal([]byte(out), &ex); err != nil {
		t.Fatalf("explain -o json: %v\n%s", err, out)
	}
	if len(ex.Candidates) != 1 || ex.Candidates[0].Window != "1/1,full" || ex.Queue == nil || ex.Queue.Queued != 1 {
		t.Errorf("explain: candidates %+v queue %+v", ex.Candidates, ex.Queue)
	}

	close(release)
	for range 2 {
		if a := <-answers; a.err != nil || a.code != http.StatusOK {
			t.Fatalf("held request: %d %v", a.code, a.err)
		}
	}
	eventually(t, 10*time.Second, "the window and the queue empty", func() bool {
		st = status()
		w := st.Endpoints[epID].Window
		return w != nil && w.InFlight == 0 && st.Queue.Queued == 0
	})
	if w := st.Endpoints[epID].Window; w.InFlight != 0 || w.Full || st.Queue.Queued != 0 || st.Queue.ShedTotal != 1 {
		t.Fatalf("after the engine answered: window %+v queue %+v", w, st.Queue)
	}
}
