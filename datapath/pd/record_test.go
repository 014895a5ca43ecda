package pd

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/spec"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

func TestOutcomeLabels(t *testing.T) {
	tests := []struct {
		name          string
		o             Outcome
		phase, status string
	}{
		{"success", Outcome{Status: 200}, "complete", "success"},
		{"prefill timeout", Outcome{Status: 504, Code: CodePrefillTimeout, FailedPhase: PhasePrefill}, "prefill", "timeout"},
		{"decode timeout", Outcome{Status: 504, Code: CodeDecodeTimeout, FailedPhase: PhaseDecode}, "decode", "timeout"},
		{"pool timeout", Outcome{Status: 504, Code: CodePoolTimeout, FailedPhase: PhasePrefill}, "prefill", "timeout"},
		{"decode died", Outcome{Status: 502, Code: CodeDecodeDied, FailedPhase: PhaseDecode}, "decode", "error"},
		{"sglang prefill failed", Outcome{Status: 502, Code: CodeSGPrefillFailed, FailedPhase: PhasePrefill}, "prefill", "error"},
		{"prefill 400 relayed", Outcome{Status: 400, Relayed: true, FailedPhase: PhasePrefill}, "prefill", "relayed"},
		{"decode 500 relayed", Outcome{Status: 500, Relayed: true}, "decode", "relayed"},
		{"client gone", Outcome{Status: StatusClientClosed, Code: CodeClientGone, ClientGone: true, FailedPhase: PhasePrefill}, "prefill", "client_closed"},
		{"stream cut", Outcome{Status: 200, StreamCut: true}, "decode", "error"},
	}
	for _, tc := range tests {
		if p, s := outcomeLabels(tc.o); p != tc.phase || s != tc.status {
			t.Errorf("%s: labels = (%s,%s), want (%s,%s)", tc.name, p, s, tc.phase, tc.status)
		}
	}
}

// TestRecordExposition pins the exposition of the key P/D families.
func TestRecordExposition(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.NewPD(reg)
	rule := &spec.Rule{Name: "r1", Key: spec.Key{ModelName: "m"}}
	Record(m, rule.Name, rule.Key.ModelName, Outcome{Status: 200, RoomRetry: true, Prefill: time.Millisecond, DecodeTTFB: time.Millisecond,
		Legs: []LegResult{{Phase: PhasePrefill, Err: errors.New("x"), Died: true}, {Phase: PhasePrefill, Status: 200}, {Phase: PhaseDecode, Status: 200}}})
	Record(m, rule.Name, rule.Key.ModelName, Outcome{Status: 200, EarlyExit: true, Legs: []LegResult{{Phase: PhasePrefill, Status: 200}}})
	Record(m, rule.Name, rule.Key.ModelName, Outcome{Status: 502, Code: CodeDecodeDied, FailedPhase: PhaseDecode, KVTransferFailed: true, PrefillFailover: true,
		Legs: []LegResult{{Phase: PhasePrefill, Status: 500}, {Phase: PhaseDecode, Err: errors.New("x"), Died: true}}})
	Record(nil, rule.Name, "", Outcome{}) // nil metrics are a no-op
	want := `
# HELP loxilb_ai_pd_requests_total P/D requests by rule, model, the phase that decided the outcome and status.
# TYPE loxilb_ai_pd_requests_total counter
loxilb_ai_pd_requests_total{model="m",phase="complete",rule="r1",status="success"} 2
loxilb_ai_pd_requests_total{model="m",phase="decode",rule="r1",status="error"} 1
# HELP loxilb_pd_sg_room_retry_total SGLang pair retries with a fresh bootstrap room after a prefill connection died.
# TYPE loxilb_pd_sg_room_retry_total counter
loxilb_pd_sg_room_retry_total{rule="r1"} 1
# HELP loxilb_pd_trt_ctx_early_exit_total TensorRT-LLM requests completed by the context step without a generation leg.
# TYPE loxilb_pd_trt_ctx_early_exit_total counter
loxilb_pd_trt_ctx_early_exit_total{rule="r1"} 1
# HELP loxilb_pd_kv_transfer_failure_total Decode legs sent without KV transfer parameters (the decode recomputes the prompt).
# TYPE loxilb_pd_kv_transfer_failure_total counter
loxilb_pd_kv_transfer_failure_total{rule="r1"} 1
# HELP loxilb_pd_prefill_ep_died_total Prefill legs whose connection could not be made or died before the response completed.
# TYPE loxilb_pd_prefill_ep_died_total counter
loxilb_pd_prefill_ep_died_total{rule="r1"} 1
# HELP loxilb_pd_decode_ep_died_total Decode legs whose connection could not be made or died before the response completed.
# TYPE loxilb_pd_decode_ep_died_total counter
loxilb_pd_decode_ep_died_total{rule="r1"} 1
# HELP loxilb_pd_connect_failover_total Prefill legs retried on another prefill endpoint.
# TYPE loxilb_pd_connect_failover_total counter
loxilb_pd_connect_failover_total{rule="r1"} 1
`
	names := []string{"loxilb_ai_pd_requests_total", "loxilb_pd_sg_room_retry_total", "loxilb_pd_trt_ctx_early_exit_total",
		"loxilb_pd_kv_transfer_failure_total", "loxilb_pd_prefill_ep_died_total", "loxilb_pd_decode_ep_died_total", "loxilb_pd_connect_failover_total"}
	got, ttfbSeries := expose(t, reg, names)
	if strings.TrimSpace(got) != strings.TrimSpace(want) {
		t.Errorf("exposition\n got:\n%s\nwant:\n%s", got, want)
	}
	if ttfbSeries != 1 {
		t.Errorf("decode TTFB observations = %d, want 1 (early exit has no decode)", ttfbSeries)
	}
}

// expose renders the named families in text format, in the given order,
// and counts decode-TTFB observations.
func expose(t *testing.T, reg *prometheus.Registry, names []string) (string, uint64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	var ttfb uint64
	for _, n := range names {
		for _, mf := range mfs {
			if mf.GetName() == n {
				if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for _, mf := range mfs {
		if mf.GetName() == "loxilb_ai_pd_decode_ttfb_seconds" {
			for _, m := range mf.GetMetric() {
				ttfb += m.GetHistogram().GetSampleCount()
			}
		}
	}
	return b.String(), ttfb
}

// TestRecordConnector: vLLM outcomes are counted under the connector
// sequence they ran; other engines' (no connector) are not.
func TestRecordConnector(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.NewPD(reg)
	rule := &spec.Rule{Name: "r1"}
	for _, c := range []string{"nixl", "mooncake", "moriio", "moriio", ""} {
		Record(m, rule.Name, "m", Outcome{Status: 200, Connector: c})
	}
	want := `
# HELP infergate_pd_kv_connector_total vLLM P/D requests by the KV connector sequence they ran (nixl, mooncake, moriio).
# TYPE infergate_pd_kv_connector_total counter
infergate_pd_kv_connector_total{connector="mooncake",rule="r1"} 1
infergate_pd_kv_connector_total{connector="moriio",rule="r1"} 2
infergate_pd_kv_connector_total{connector="nixl",rule="r1"} 1
`
	if got, _ := expose(t, reg, []string{"infergate_pd_kv_connector_total"}); strings.TrimSpace(got) != strings.TrimSpace(want) {
		t.Errorf("exposition\n got:\n%s\nwant:\n%s", got, want)
	}
}
