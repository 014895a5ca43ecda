package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Grafana dashboard checked against the real Prometheus.
const (
	promDashboardRel = "configs/observability/grafana-dashboard.json"
	// promDashboardVars are the dashboard's template variables as Grafana
	// expands them with "All" selected (allValue ".*").
	promDashboardExprKey = "expr"
)

var (
	promDashboardVars = strings.NewReplacer("$rule", ".*", "${rule}", ".*", "$__rate_interval", "1m", "$__interval", "15s")
	promMetricName    = regexp.MustCompile(`\b(?:infergate|loxilb)_[a-z0-9_]+`)
)

// dashboardExprs returns every panel target's expr of the shipped Grafana
// dashboard, template variables expanded.
func dashboardExprs(t *testing.T, root string) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, promDashboardRel))
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s: %v", promDashboardRel, err)
	}
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if e, ok := x[promDashboardExprKey].(string); ok && e != "" {
				out = append(out, promDashboardVars.Replace(e))
			}
			for _, c := range x {
				walk(c)
			}
		case []any:
			for _, c := range x {
				walk(c)
			}
		}
	}
	walk(doc)
	if len(out) == 0 {
		t.Fatalf("%s has no panel expressions", promDashboardRel)
	}
	return out
}

// checkDashboardQueries runs every dashboard expression on the real
// Prometheus: each must evaluate without error, and return data once every
// metric family it names is exported by the daemon (families only some rule
// shapes or failures create, such as the CHWBL picks, and error panels that
// select error!="" are logged, not failed).
func checkDashboardQueries(t *testing.T, root, prom, daemon string) {
	t.Helper()
	exported := func() string {
		resp, err := http.Get(daemon + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}()
	for _, q := range dashboardExprs(t, root) {
		names := promMetricName.FindAllString(q, -1)
		present := len(names) > 0
		for _, n := range names {
			base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")
			present = present && (strings.Contains(exported, "\n"+base) || strings.Contains(exported, "# TYPE "+base+" "))
		}
		// Error panels (error!="", status!="200") are empty when all is well.
		mayBeEmpty := !present || strings.Contains(q, "!=")
		deadline := time.Now().Add(promQueryTimeout)
		for {
			r, err := promQuery(prom, q)
			if err != nil {
				t.Errorf("dashboard query invalid: %v", err)
				break
			}
			if len(r.Data.Result) > 0 {
				break
			}
			if mayBeEmpty {
				t.Logf("dashboard query evaluates, no data (families not exported by the demo, or an error panel): %s", q)
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("dashboard query returned no data after %v: %s", promQueryTimeout, q)
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
}
