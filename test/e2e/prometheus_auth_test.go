package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPrometheusScrapesWithToken: a real Prometheus scrapes a daemon whose
// API has a token file, using the read-only token through
// authorization.credentials_file (what configs/observability/prometheus.yml
// documents); the same target without it is down (401).
func TestPrometheusScrapesWithToken(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs Prometheus")
	}
	requirePrometheus(t)
	const roToken = "prom-ro-0123456789abcdef0123456789"
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	writeTokenFile(t, tokens, "rw:prom-rw-0123456789abcdef0123456789\nro:"+roToken+"\n")
	// Prometheus's credentials_file holds the bare token (no ro: prefix).
	cred := filepath.Join(dir, "prom-token")
	writeTokenFile(t, cred, roToken+"\n")
	bin := cliBuild(t)
	d := cliStartDaemon(t, bin, filepath.Join(dir, "state"), "--api-token-file", tokens)
	target := strings.TrimPrefix(d.URL, "http://")
	prom := promStartConfig(t, fmt.Sprintf(`global:
  scrape_interval: 1s
scrape_configs:
  - job_name: with-token
    authorization:
      type: Bearer
      credentials_file: %s
    static_configs:
      - targets: ["%s"]
  - job_name: without-token
    static_configs:
      - targets: ["%s"]
`, cred, target, target))
	up := func(job string) string {
		r, err := promQuery(prom, `up{job="`+job+`"}`)
		if err != nil || len(r.Data.Result) != 1 {
			return ""
		}
		var sample struct {
			Value [2]any `json:"value"` // [timestamp, "value"]
		}
		if json.Unmarshal(r.Data.Result[0], &sample) != nil {
			return ""
		}
		v, _ := sample.Value[1].(string)
		return v
	}
	eventually(t, 30*time.Second, "both jobs scraped", func() bool {
		return up("with-token") != "" && up("without-token") != ""
	})
	if got := up("with-token"); got != "1" {
		t.Errorf("up{job=with-token} = %s, want 1", got)
	}
	if got := up("without-token"); got != "0" {
		t.Errorf("up{job=without-token} = %s, want 0 (401)", got)
	}
}
