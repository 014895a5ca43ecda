package metrics

import (
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"gopkg.in/yaml.v3"
)

// Files the documentation test reads, relative to this package.
const (
	docsPath      = "../docs/metrics.md"
	alertsPath    = "../configs/observability/alerts.yml"
	dashboardPath = "../configs/observability/grafana-dashboard.json"
	queriesHeader = "## Useful queries"
)

var (
	descName  = regexp.MustCompile(`fqName: "([^"]+)"`)
	promToken = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	docRow    = regexp.MustCompile("^\\| `([a-zA-Z_:][a-zA-Z0-9_:]*)` \\|")
)

// registeredFamilies walks everything New builds and asks each collector to
// describe itself, so vectors without series and scrape-time collectors
// (unexported fields) count too: Gather alone would miss them.
func registeredFamilies(t *testing.T) map[string]bool {
	t.Helper()
	m := New()
	out := map[string]bool{}
	seen := map[uintptr]bool{}
	collectorType := reflect.TypeOf((*prometheus.Collector)(nil)).Elem()
	pkg := reflect.TypeOf(Metrics{}).PkgPath()
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		if v.Kind() == reflect.Pointer {
			if v.IsNil() || seen[v.Pointer()] {
				return
			}
			seen[v.Pointer()] = true
		}
		if v.Type().Implements(collectorType) && v.Type() != reflect.TypeOf(m.Registry) {
			ch := make(chan *prometheus.Desc, 64)
			go func() { v.Interface().(prometheus.Collector).Describe(ch); close(ch) }()
			for d := range ch {
				if mm := descName.FindStringSubmatch(d.String()); mm != nil {
					out[mm[1]] = true
				}
			}
			return
		}
		s := v
		if s.Kind() == reflect.Pointer {
			s = s.Elem()
		}
		if s.Kind() != reflect.Struct || s.Type().PkgPath() != pkg {
			return
		}
		for i := 0; i < s.NumField(); i++ {
			f := s.Field(i)
			if !f.CanInterface() { // unexported: read it anyway, it is ours
				f = reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
			}
			if f.Kind() == reflect.Pointer || f.Kind() == reflect.Interface || f.Kind() == reflect.Struct {
				if f.Kind() == reflect.Interface {
					if f.IsNil() {
						continue
					}
					f = f.Elem()
				}
				walk(f)
			}
		}
	}
	walk(reflect.ValueOf(m))
	// Cross-check: everything the registry can gather must have been found.
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if !out[f.GetName()] {
			t.Errorf("%s is gathered but not reachable from Metrics' fields", f.GetName())
		}
	}
	if len(out) < 40 {
		t.Fatalf("found only %d families: the walk is broken", len(out))
	}
	return out
}

// documentedFamilies returns the names in the first column of every
// reference table in docs/metrics.md.
func documentedFamilies(t *testing.T) (map[string]bool, string) {
	t.Helper()
	b, err := os.ReadFile(docsPath)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if m := docRow.FindStringSubmatch(line); m != nil {
			if out[m[1]] {
				t.Errorf("docs/metrics.md documents %s twice", m[1])
			}
			out[m[1]] = true
		}
	}
	return out, string(b)
}

// runtimeFamily: client_golang's Go and process collectors (runtime.go),
// documented as one section rather than a row per family.
func runtimeFamily(n string) bool {
	return strings.HasPrefix(n, "go_") || strings.HasPrefix(n, "process_")
}

// TestDocsMatchRegistered: every registered family is documented (the
// runtime's as a section), and every documented family is registered.
func TestDocsMatchRegistered(t *testing.T) {
	reg := registeredFamilies(t)
	doc, _ := documentedFamilies(t)
	for _, n := range sorted(reg) {
		if !doc[n] && !runtimeFamily(n) {
			t.Errorf("%s is registered by metrics.New but has no row in docs/metrics.md", n)
		}
	}
	for _, n := range sorted(doc) {
		if !reg[n] {
			t.Errorf("docs/metrics.md documents %s, which metrics.New does not register", n)
		}
	}
}

// metricTokens crudely extracts metric names from PromQL: identifier tokens
// with one of our prefixes, histogram/summary suffixes stripped.
func metricTokens(expr string) []string {
	var out []string
	for _, tok := range promToken.FindAllString(expr, -1) {
		if !strings.HasPrefix(tok, "loxilb_") && !strings.HasPrefix(tok, "infergate_") {
			continue
		}
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if s, ok := strings.CutSuffix(tok, suf); ok {
				tok = s
				break
			}
		}
		out = append(out, tok)
	}
	return out
}

// exprs collects every "expr" string value anywhere in a decoded document.
func exprs(v any, out *[]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, c := range x {
			if s, ok := c.(string); ok && k == "expr" {
				*out = append(*out, s)
				continue
			}
			exprs(c, out)
		}
	case []any:
		for _, c := range x {
			exprs(c, out)
		}
	}
}

// TestObservabilityPackUsesRealMetrics: the alert rules, the dashboard and
// the documented queries only name metrics that exist (a renamed family
// must not silently blank a panel or disarm an alert).
func TestObservabilityPackUsesRealMetrics(t *testing.T) {
	reg := registeredFamilies(t)
	_, doc := documentedFamilies(t)

	var alerts, dash any
	ab, err := os.ReadFile(alertsPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(ab, &alerts); err != nil {
		t.Fatalf("%s: %v", alertsPath, err)
	}
	db, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(db, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	i := strings.Index(doc, queriesHeader)
	if i < 0 {
		t.Fatalf("docs/metrics.md has no %q section", queriesHeader)
	}
	queries := doc[i:]
	if j := strings.Index(queries[len(queriesHeader):], "\n## "); j >= 0 {
		queries = queries[:len(queriesHeader)+j]
	}
	sources := []struct {
		name  string
		exprs []string
		min   int // a file that parses to nothing is a broken file
	}{
		{name: alertsPath, min: 5},
		{name: dashboardPath, min: 8},
		{name: "docs/metrics.md " + queriesHeader, exprs: []string{queries}, min: 1},
	}
	exprs(alerts, &sources[0].exprs)
	exprs(dash, &sources[1].exprs)
	for _, s := range sources {
		if len(s.exprs) < s.min {
			t.Errorf("%s: %d expressions, want at least %d", s.name, len(s.exprs), s.min)
		}
		used := 0
		for _, e := range s.exprs {
			for _, tok := range metricTokens(e) {
				used++
				if !reg[tok] {
					t.Errorf("%s uses %s, which metrics.New does not register (expr %q)", s.name, tok, e)
				}
			}
		}
		if used == 0 {
			t.Errorf("%s names no infergate metric", s.name)
		}
	}
}

func TestMetricTokens(t *testing.T) {
	tests := []struct {
		expr string
		want string
	}{
		{`histogram_quantile(0.95, sum by (rule, le) (rate(loxilb_ai_pd_prefill_duration_seconds_bucket[5m])))`, "loxilb_ai_pd_prefill_duration_seconds"},
		{`sum(rate(infergate_datapath_requests_total{error!=""}[1m])) / sum(rate(infergate_api_requests_total[1m]))`, "infergate_datapath_requests_total infergate_api_requests_total"},
		{`rate(loxilb_pd_trie_match_rate_sum[5m]) / rate(loxilb_pd_trie_match_rate_count[5m])`, "loxilb_pd_trie_match_rate loxilb_pd_trie_match_rate"},
		{`up{job="infergate"} == 0`, ""},
	}
	for _, tc := range tests {
		if got := strings.Join(metricTokens(tc.expr), " "); got != tc.want {
			t.Errorf("metricTokens(%q) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}

func sorted(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
