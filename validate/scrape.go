package validate

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// maxScrape bounds one /metrics body (a daemon with hundreds of rules stays
// far below it).
const maxScrape = 32 << 20

// Label names the workflow filters on.
const (
	labelRule     = "rule"
	labelEndpoint = "endpoint"
	labelPhase    = "phase"
	labelStatus   = "status"
	labelTier     = "tier"
	labelOutcome  = "outcome"
	labelReason   = "reason"
)

// Snapshot is one parsed scrape of the daemon's /metrics. Histograms and
// summaries appear as their _count and _sum series, so deltas work the same
// for every type.
type Snapshot struct {
	series map[string][]sample
}

type sample struct {
	labels map[string]string
	value  float64
}

// Labels selects series whose labels equal every given pair.
type Labels map[string]string

// Scrape fetches and parses url (the daemon's /metrics).
func Scrape(ctx context.Context, hc *http.Client, url string) (*Snapshot, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: status %d", url, resp.StatusCode)
	}
	return ParseSnapshot(io.LimitReader(resp.Body, maxScrape))
}

// ParseSnapshot parses the Prometheus text exposition format.
func ParseSnapshot(r io.Reader) (*Snapshot, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	s := &Snapshot{series: make(map[string][]sample, len(fams))}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			ls := make(map[string]string, len(m.GetLabel()))
			for _, l := range m.GetLabel() {
				ls[l.GetName()] = l.GetValue()
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				s.add(name, ls, m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				s.add(name, ls, m.GetGauge().GetValue())
			case dto.MetricType_HISTOGRAM:
				s.add(name+"_count", ls, float64(m.GetHistogram().GetSampleCount()))
				s.add(name+"_sum", ls, m.GetHistogram().GetSampleSum())
			case dto.MetricType_SUMMARY:
				s.add(name+"_count", ls, float64(m.GetSummary().GetSampleCount()))
				s.add(name+"_sum", ls, m.GetSummary().GetSampleSum())
			default:
				s.add(name, ls, m.GetUntyped().GetValue())
			}
		}
		if len(f.GetMetric()) == 0 {
			s.series[name] = nil // declared, no series yet
		}
	}
	return s, nil
}

func (s *Snapshot) add(name string, ls map[string]string, v float64) {
	s.series[name] = append(s.series[name], sample{ls, v})
}

// Has reports whether the daemon exports the family at all (a vector with no
// series yet counts: client_golang omits it, so this is false then too).
func (s *Snapshot) Has(name string) bool {
	if s == nil {
		return false
	}
	_, ok := s.series[name]
	return ok
}

// Sum adds every series of name matching sel.
func (s *Snapshot) Sum(name string, sel Labels) float64 {
	if s == nil {
		return 0
	}
	total := 0.0
	for _, x := range s.series[name] {
		if matches(x.labels, sel) {
			total += x.value
		}
	}
	return total
}

// By sums series of name matching sel, grouped by the value of label.
func (s *Snapshot) By(name, label string, sel Labels) map[string]float64 {
	out := map[string]float64{}
	if s == nil {
		return out
	}
	for _, x := range s.series[name] {
		if matches(x.labels, sel) {
			out[x.labels[label]] += x.value
		}
	}
	return out
}

func matches(ls map[string]string, sel Labels) bool {
	for k, v := range sel {
		if ls[k] != v {
			return false
		}
	}
	return true
}

// deltaBy is after−before per label value, keeping only values that moved.
func deltaBy(before, after *Snapshot, name, label string, sel Labels) map[string]float64 {
	a, b := after.By(name, label, sel), before.By(name, label, sel)
	out := map[string]float64{}
	for k, v := range a {
		if d := v - b[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// formatDeltas renders {a:+2 b:+1} in a stable order.
func formatDeltas(d map[string]float64) string {
	if len(d) == 0 {
		return "no change"
	}
	keys := make([]string, 0, len(d))
	for k := range d {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		name := k
		if name == "" {
			name = "(none)"
		}
		parts[i] = fmt.Sprintf("%s %+g", name, d[k])
	}
	return strings.Join(parts, ", ")
}
