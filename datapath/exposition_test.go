package datapath

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/spec"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// TestExpositionGolden pins the text exposition of the key datapath
// families after a known sequence: 2 successes, one engine 503, one request
// with no matching rule. Endpoint addresses are replaced by EP.
func TestExpositionGolden(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.NewDatapath(reg)
	rt := New(testOptions(), m, nil)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = rt.Close(ctx)
	}()
	e := startEngine(t, "e")
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	r.Name = "golden"
	r.Key.PathPrefix, r.Key.PathMatchMode = "/v1/completions", pathMatchExact
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	c := testClient()
	post(t, c, ruleURL(r)+"/v1/completions", completionBody)
	post(t, c, ruleURL(r)+"/v1/completions", completionBody)
	e.SetStatus(503)
	post(t, c, ruleURL(r)+"/v1/completions", completionBody)
	post(t, c, ruleURL(r)+"/v1/chat/completions", `{"messages":[]}`) // no rule

	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	keep := map[string]bool{
		"infergate_datapath_requests_total": true, "infergate_datapath_active_requests": true,
		"infergate_datapath_endpoint_health_state": true, "infergate_datapath_breaker_state": true,
		"infergate_datapath_listeners": true,
	}
	for _, f := range fams {
		if keep[f.GetName()] {
			if _, err := expfmt.MetricFamilyToText(&buf, f); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := strings.ReplaceAll(buf.String(), e.Addr(), "EP")
	want := fmt.Sprintf(`# HELP infergate_datapath_active_requests Requests currently in flight to an endpoint (the least-connections load).
# TYPE infergate_datapath_active_requests gauge
infergate_datapath_active_requests{endpoint="EP",rule="golden"} 0
# HELP infergate_datapath_breaker_state Circuit breaker state per endpoint: 0 closed, 1 open, 2 half-open.
# TYPE infergate_datapath_breaker_state gauge
infergate_datapath_breaker_state{endpoint="EP",rule="golden"} 0
# HELP infergate_datapath_endpoint_health_state Probe state per endpoint: 0 probing, 1 active, 2 down.
# TYPE infergate_datapath_endpoint_health_state gauge
infergate_datapath_endpoint_health_state{endpoint="EP",rule="golden"} 1
# HELP infergate_datapath_listeners VIP:port listeners currently bound.
# TYPE infergate_datapath_listeners gauge
infergate_datapath_listeners 1
# HELP infergate_datapath_requests_total Proxied requests by rule, endpoint (empty when none was chosen), HTTP status code and infergate error code (empty on success).
# TYPE infergate_datapath_requests_total counter
infergate_datapath_requests_total{code="200",endpoint="EP",error="",rule="golden"} 2
infergate_datapath_requests_total{code="404",endpoint="",error="%s",rule=""} 1
infergate_datapath_requests_total{code="503",endpoint="EP",error="",rule="golden"} 1
`, CodeNoMatchingRule)
	if got != want {
		t.Fatalf("exposition differs.\n--- got\n%s\n--- want\n%s", got, want)
	}
}
