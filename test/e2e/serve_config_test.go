package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cfgStartEngine runs one `infergate fake-engine` (what the demo starts) on
// an ephemeral loopback port and returns its address from the banner. It is
// stopped when the test ends.
func cfgStartEngine(t *testing.T, bin, role string) string {
	t.Helper()
	cmd := exec.Command(bin, "fake-engine", "--dialect", "vllm", "--role", role, "--addr", "127.0.0.1:0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start fake %s engine: %v", role, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(cliStopTimeout):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			for _, f := range strings.Fields(sc.Text()) {
				if a, ok := strings.CutPrefix(f, "addr="); ok {
					select {
					case addr <- a:
					default:
					}
				}
			}
		}
	}()
	select {
	case a := <-addr:
		return a
	case <-time.After(cliReadyTimeout):
		t.Fatalf("fake %s engine printed no banner", role)
		return ""
	}
}

// TestServeConfigFileAndEnv: the built binary started with --config and an
// INFERGATE_* variable loads the demo's 1P1D rule named in the file,
// serves it, and logs in the format the variable chose over the file's;
// --print-config shows the same merged options without starting anything.
func TestServeConfigFileAndEnv(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := cliBuild(t)
	prefill, decode := cfgStartEngine(t, bin, "prefill"), cfgStartEngine(t, bin, "decode")
	endpoint := func(addr string, role int) string {
		host, port, _ := net.SplitHostPort(addr)
		return fmt.Sprintf("    - {endpointIP: %s, targetPort: %s, weight: 1, ep_role: %d}\n", host, port, role)
	}
	vipPort := cliFreePort(t)
	dir := t.TempDir()
	rulesFile := filepath.Join(dir, "demo-1p1d.yaml")
	rule := `apiVersion: infergate/v1
kind: Loadbalancer
spec:
  serviceArguments: {name: demo-1p1d, externalIP: 127.0.0.1, port: ` + strconv.Itoa(vipPort) + `, protocol: tcp, mode: 4,
    pd_disagg_mode: true, kvEngineType: vllm, sse_mode: true, probetype: http, probereq: /health}
  endpoints:
` + endpoint(prefill, 1) + endpoint(decode, 2)
	config := filepath.Join(dir, "infergate.yaml")
	file := "rules: " + rulesFile + "\nlog-format: text\nprefill-timeout: 20s\n"
	for p, body := range map[string]string{rulesFile: rule, config: file} {
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("INFERGATE_LOG_FORMAT", "json") // env beats the file's text
	t.Setenv("INFERGATE_DRAIN_GRACE", "2s")

	res := cliRun(t, bin, "", "serve", "--config", config, "--print-config", "--api-addr", "127.0.0.1:1")
	if res.Code != 0 {
		t.Fatalf("--print-config: exit %d: %s", res.Code, res.Stderr)
	}
	for _, w := range []string{"rules: " + rulesFile + "\n", "log-format: json\n", "prefill-timeout: 20s\n", "drain-grace: 2s\n", "api-addr: 127.0.0.1:1\n"} {
		if !strings.Contains(res.Stdout, w) {
			t.Errorf("--print-config lacks %q:\n%s", w, res.Stdout)
		}
	}

	d := cliStartDaemon(t, bin, t.TempDir(), "--config", config)
	vip := net.JoinHostPort("127.0.0.1", strconv.Itoa(vipPort))
	eventually(t, 20*time.Second, "demo-1p1d serving through "+vip, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+vip+"/v1/completions",
			strings.NewReader(`{"model":"demo-model","prompt":"Hello","max_tokens":8}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	demoServes(t, vip)
	// Access lines are batched (--access-log-flush, 1 s by default): wait
	// for one, so the prompt check below reads the lines a request wrote.
	eventually(t, 10*time.Second, "an access line in the daemon's log", func() bool {
		return strings.Contains(d.log.String(), `"msg":"access"`)
	})

	lines := 0
	for _, l := range strings.Split(strings.TrimSpace(d.log.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Errorf("log line is not JSON (INFERGATE_LOG_FORMAT=json): %q", l)
			continue
		}
		if _, ok := rec["msg"]; !ok {
			t.Errorf("JSON log line without msg: %q", l)
		}
		lines++
	}
	if lines == 0 {
		t.Error("daemon logged nothing")
	}
	if strings.Contains(d.log.String(), "Hello") {
		t.Errorf("the prompt reached the info log:\n%s", d.log.String())
	}
}
