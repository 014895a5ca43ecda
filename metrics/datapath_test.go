package metrics

import (
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestDatapathFamiliesDocumented checks that every datapath family is in
// docs/metrics.md's table and that the table names no family we lack.
func TestDatapathFamiliesDocumented(t *testing.T) {
	reg := prometheus.NewRegistry()
	d := NewDatapath(reg)
	// Vectors only appear once they have a child.
	d.Requests.WithLabelValues("r", "e", "200", "").Inc()
	d.Active.WithLabelValues("r", "e").Inc()
	d.Latency.WithLabelValues("r").Observe(1)
	d.TTFB.WithLabelValues("r").Observe(1)
	d.Health.WithLabelValues("r", "e").Set(1)
	d.Breaker.WithLabelValues("r", "e").Set(0)
	d.BreakerTrans.WithLabelValues("r", "e", "open").Inc()
	d.Retries.WithLabelValues("r").Inc()
	d.Failover.WithLabelValues("r").Inc()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(doc)
	if i := strings.Index(section, "## Datapath"); i >= 0 {
		section = section[i:]
		if j := strings.Index(section[3:], "\n## "); j >= 0 {
			section = section[:j+3]
		}
	} else {
		t.Fatal("docs/metrics.md has no Datapath section")
	}
	registered := map[string]bool{}
	for _, f := range fams {
		registered[f.GetName()] = true
		if !strings.Contains(section, "`"+f.GetName()+"`") {
			t.Errorf("%s is registered but not documented in docs/metrics.md", f.GetName())
		}
	}
	if len(registered) != 12 {
		t.Errorf("gathered %d datapath families, want 12 (a family without a child here?)", len(registered))
	}
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		name := strings.TrimPrefix(line, "| `")
		name = name[:strings.IndexByte(name, '`')]
		if !registered[name] {
			t.Errorf("docs/metrics.md documents %s, which the datapath does not register", name)
		}
	}
}
