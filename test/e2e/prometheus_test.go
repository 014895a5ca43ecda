package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/testtool"
)

// Bounds of the real-Prometheus test.
const (
	promBinary       = "/usr/bin/prometheus"
	promTool         = "promtool"
	promReadyTimeout = 60 * time.Second
	promQueryTimeout = 60 * time.Second
	promStopTimeout  = 15 * time.Second
	promTraffic      = 400 // most requests the traffic loop sends
	promQueriesFence = "```promql\n"
	promKVFence      = "```promql-kv\n"
	promFenceEnd     = "```"
	promAlertsRel    = "configs/observability/alerts.yml"
	promDocsRel      = "docs/metrics.md"
)

// promQueries returns the one-line queries of docs/metrics.md's block
// opened by fence.
func promQueries(t *testing.T, root, fence string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, promDocsRel))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i := strings.Index(doc, fence)
	if i < 0 {
		t.Fatalf("%s has no %q block", promDocsRel, strings.TrimSpace(fence))
	}
	block := doc[i+len(fence):]
	block = block[:strings.Index(block, promFenceEnd)]
	var out []string
	for _, line := range strings.Split(block, "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	if len(out) < 3 {
		t.Fatalf("only %d queries in %s's %s block", len(out), promDocsRel, strings.TrimSpace(fence))
	}
	return out
}

// promStart runs Prometheus on a free loopback port with a temp TSDB and a
// 1 s scrape of target, loading the shipped alert rules.
func promStart(t *testing.T, root, target string) string {
	t.Helper()
	return promStartConfig(t, fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - %s
scrape_configs:
  - job_name: infergate
    static_configs:
      - targets: ["%s"]
`, filepath.Join(root, promAlertsRel), target))
}

// promStartConfig runs Prometheus with the config text cfg on a free
// loopback port with a temp TSDB, and returns its base URL once ready.
func promStartConfig(t *testing.T, cfg string) string {
	t.Helper()
	dir := t.TempDir()
	port := cliFreePort(t)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	log := &cliSyncBuffer{}
	cmd := exec.Command(promBinary, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(promStopTimeout):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("prometheus log:\n%s", log.String())
		}
	})
	base := "http://" + addr
	deadline := time.Now().Add(promReadyTimeout)
	for {
		resp, err := http.Get(base + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		select {
		case <-done:
			t.Fatalf("prometheus exited:\n%s", log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready after %v:\n%s", promReadyTimeout, log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// promResult is a /api/v1/query answer.
type promResult struct {
	Status string `json:"status"`
	Error  string `json:"error"`
	Data   struct {
		Result []json.RawMessage `json:"result"`
	} `json:"data"`
}

func promQuery(base, q string) (promResult, error) {
	var r promResult
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return r, err
	}
	if r.Status != "success" {
		return r, fmt.Errorf("query %q: %s", q, r.Error)
	}
	return r, nil
}

// TestPrometheusScrapesDaemon: a real Prometheus scrapes the built daemon
// (the demo: P/D rules over fake engine processes) under traffic, and every
// query docs/metrics.md recommends returns data, every Grafana dashboard
// query evaluates (and returns data when the demo exports its families);
// the shipped alert rules load and pass promtool.
func TestPrometheusScrapesDaemon(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs Prometheus")
	}
	requirePrometheus(t)
	root := cliRepoRoot(t)
	tool := testtool.Require(t, promTool, "prometheus")
	if out, err := exec.Command(tool, "check", "rules", filepath.Join(root, promAlertsRel)).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules: %v\n%s", err, out)
	}
	queries := append(promQueries(t, root, promQueriesFence), promQueries(t, root, promKVFence)...)
	bin := cliBuild(t)
	d := demoStart(t, bin)
	demoServes(t, d.vip)

	// Traffic until the test ends: bounded in count, paced, stopped in cleanup.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		hc := &http.Client{Timeout: 10 * time.Second}
		for i := 0; i < promTraffic && ctx.Err() == nil; i++ {
			// Alternate the 1P1D rule and the cache-aware KV-exact rule; the
			// latter gets a shared head so Tier 1 and the inventory work.
			vip, prompt := d.vip, fmt.Sprintf("hello %d", i)
			if i%2 == 1 {
				vip, prompt = d.vipCache, strings.Repeat("shared system prompt words ", 40)+prompt
			}
			body := fmt.Sprintf(`{"model":"demo-model","prompt":%q,"max_tokens":4,"stream":%v}`, prompt, i%4 == 1)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+vip+"/v1/completions", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			if resp, err := hc.Do(req); err == nil {
				_, _ = drainBody(resp)
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()

	prom := promStart(t, root, strings.TrimPrefix(d.api, "http://"))
	for _, q := range queries {
		deadline := time.Now().Add(promQueryTimeout)
		for {
			r, err := promQuery(prom, q)
			if err != nil {
				t.Errorf("%v", err)
				break
			}
			if len(r.Data.Result) > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("query returned no data after %v: %s", promQueryTimeout, q)
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	// The alert rules loaded into the real server.
	checkDashboardQueries(t, root, prom, d.api)
	resp, err := http.Get(prom + "/api/v1/rules")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rules struct {
		Data struct {
			Groups []struct {
				Rules []struct {
					Name   string `json:"name"`
					Health string `json:"health"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&rules); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range rules.Data.Groups {
		for _, r := range g.Rules {
			n++
			if r.Health == "err" {
				t.Errorf("alert rule %s evaluates with an error", r.Name)
			}
		}
	}
	if n < 5 {
		t.Errorf("prometheus loaded %d alert rules, want the shipped set", n)
	}
}

// drainBody drains and closes an answer so the connection is reused.
func drainBody(resp *http.Response) (int64, error) {
	defer resp.Body.Close()
	var buf [4096]byte
	var n int64
	for {
		m, err := resp.Body.Read(buf[:])
		n += int64(m)
		if err != nil {
			return n, nil
		}
	}
}

// requirePrometheus skips (outside CI) or fails (in CI) a test that runs
// Debian's Prometheus server when it is not installed.
func requirePrometheus(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(promBinary); err != nil {
		testtool.Missing(t, "%s not installed (Debian package prometheus): %v", promBinary, err)
	}
}
