package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// TestKVExposition is the golden test of the KV families' exposition: names,
// types and labels are a contract with dashboards and alerts.
func TestKVExposition(t *testing.T) {
	reg := prometheus.NewRegistry()
	k := NewKV(reg)
	now := time.Unix(1_800_000_100, 0)
	k.lastEvent.now = func() time.Time { return now }

	k.Blocks.WithLabelValues("r1", "10.0.0.1:8000").Set(42)
	k.SubscriberConnected.WithLabelValues("r1", "10.0.0.1:8000", "0").Set(1)
	k.EventsApplied.WithLabelValues("r1", "BlockStored").Add(3)
	k.SeqGaps.WithLabelValues("r1", "10.0.0.1:8000", "1").Inc()
	k.ObserveEvent("r1", "10.0.0.1:8000", now.Add(-2500*time.Millisecond))

	got := gather(t, reg)
	want := []string{
		"# TYPE loxilb_pd_kv_blocks gauge",
		`loxilb_pd_kv_blocks{endpoint="10.0.0.1:8000",rule="r1"} 42`,
		"# TYPE loxilb_kv_subscriber_connected gauge",
		`loxilb_kv_subscriber_connected{endpoint="10.0.0.1:8000",rank="0",rule="r1"} 1`,
		"# TYPE loxilb_kv_events_applied_total counter",
		`loxilb_kv_events_applied_total{rule="r1",type="BlockStored"} 3`,
		"# TYPE loxilb_kv_seq_gaps_total counter",
		`loxilb_kv_seq_gaps_total{endpoint="10.0.0.1:8000",rank="1",rule="r1"} 1`,
		"# TYPE loxilb_kv_last_event_age_seconds gauge",
		`loxilb_kv_last_event_age_seconds{endpoint="10.0.0.1:8000",rule="r1"} 2.5`,
	}
	for _, w := range want {
		if !strings.Contains(got, w+"\n") {
			t.Errorf("exposition lacks %q\n--- got:\n%s", w, got)
		}
	}

	k.ForgetEndpoint("r1", "10.0.0.1:8000")
	got = gather(t, reg)
	for _, gone := range []string{"loxilb_pd_kv_blocks{", "loxilb_kv_subscriber_connected{", "loxilb_kv_last_event_age_seconds{", "loxilb_kv_seq_gaps_total{"} {
		if strings.Contains(got, gone) {
			t.Errorf("series %s survived ForgetEndpoint", gone)
		}
	}
	if !strings.Contains(got, `loxilb_kv_events_applied_total{rule="r1",type="BlockStored"} 3`) {
		t.Error("rule-level series must survive ForgetEndpoint")
	}
}

func gather(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&sb, mf); err != nil {
			t.Fatal(err)
		}
	}
	return sb.String()
}
