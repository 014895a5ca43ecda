package metrics

import "github.com/prometheus/client_golang/prometheus"

// PD covers prefill/decode disaggregated serving (datapath/pd). Names keep
// LoxiLB's loxilb_ prefix so existing dashboards and CICD greps keep working.
type PD struct {
	// Requests counts one per P/D request outcome: phase is complete,
	// prefill or decode (where it failed); status success, error, timeout,
	// relayed (an engine 4xx passed through) or client_closed.
	Requests *prometheus.CounterVec // loxilb_ai_pd_requests_total{rule,model,phase,status}
	// RoomRetries counts SGLang pair retries with a fresh bootstrap room.
	RoomRetries *prometheus.CounterVec // loxilb_pd_sg_room_retry_total{rule}
	// TRTEarlyExits counts TensorRT-LLM requests finished by the context step.
	TRTEarlyExits *prometheus.CounterVec // loxilb_pd_trt_ctx_early_exit_total{rule}
	// KVTransferFailures counts decodes that recomputed the prompt because no
	// transfer params were obtained (prefill failed or returned none).
	KVTransferFailures *prometheus.CounterVec // loxilb_pd_kv_transfer_failure_total{rule}
	// PrefillDeaths / DecodeDeaths count legs whose connection failed or died.
	PrefillDeaths *prometheus.CounterVec // loxilb_pd_prefill_ep_died_total{rule}
	DecodeDeaths  *prometheus.CounterVec // loxilb_pd_decode_ep_died_total{rule}
	// Failovers counts prefill retries on another endpoint (vLLM/TRT).
	Failovers *prometheus.CounterVec // loxilb_pd_connect_failover_total{rule}

	PrefillDuration *prometheus.HistogramVec // loxilb_ai_pd_prefill_duration_seconds{rule}
	DecodeTTFB      *prometheus.HistogramVec // loxilb_ai_pd_decode_ttfb_seconds{rule}
	Duration        *prometheus.HistogramVec // loxilb_ai_pd_request_duration_seconds{rule}

	// LegRequests counts every upstream leg by endpoint, phase (prefill,
	// decode) and engine status ("none" when no answer arrived), so an
	// operator can prove each role handled traffic.
	LegRequests *prometheus.CounterVec // infergate_pd_leg_requests_total{rule,endpoint,phase,status}
	// LadderDecisions counts each ladder step of every P/D routing decision
	// (outcome hit or miss; reason is the fall-through or choice reason).
	LadderDecisions *prometheus.CounterVec // infergate_ladder_decisions_total{rule,tier,outcome,reason}
	// SessionHits counts Tier 0 hits (a pinned pair reused).
	SessionHits *prometheus.CounterVec // loxilb_ai_pd_session_hits_total{rule}
	// FallbackToNormal counts P/D requests served unsplit by a role-0
	// endpoint because no usable (prefill, decode) pair existed.
	FallbackToNormal *prometheus.CounterVec // loxilb_pd_fallback_to_normal_total{rule}

	// --- HTTP surface ---
	// Unsplit counts requests a P/D rule served without the P/D sequence:
	// side paths (tokenize, embeddings, models, …), generation APIs the
	// engine's transfer does not cover, or shapes the handoff cannot serve
	// (vLLM n>1, best_of>1, beam search, prompt lists: decode computes).
	Unsplit *prometheus.CounterVec // infergate_pd_unsplit_requests_total{rule,path,reason}
	// Edge hardening.

	// ClientTransferState counts client attempts to set engine transfer
	// state on a P/D rule: action "request_id_rejected" (a request id with
	// vLLM's peer-address markers, answered 400) or "field_stripped" (one
	// per removed kv_transfer_params / bootstrap_* / disaggregated_params).
	ClientTransferState *prometheus.CounterVec // infergate_pd_client_transfer_state_total{rule,action}
	// DecodeFailovers counts decode legs re-sent to another decode because
	// the first one's connection failed before the engine got the request.
	DecodeFailovers *prometheus.CounterVec // infergate_pd_decode_failovers_total{rule}
	// HandoffInvalid counts prefill answers whose transfer parameters a
	// decode could not use (answered 502 pd_handoff_invalid, no decode leg).
	HandoffInvalid *prometheus.CounterVec // infergate_pd_handoff_invalid_total{rule}
	// ClientTTFT is the time a client waits on a P/D rule: request arrival
	// to the first body byte of a successful answer.
	ClientTTFT *prometheus.HistogramVec // infergate_pd_client_ttft_seconds{rule,model}
	// KVConnector counts vLLM P/D requests by the connector sequence they
	// ran (nixl, mooncake, moriio).
	KVConnector *prometheus.CounterVec // infergate_pd_kv_connector_total{rule,connector}
}

func newPD(reg prometheus.Registerer) *PD {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	hist := func(name, help string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: name, Help: help,
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15), // 1 ms … 16 s
		}, []string{"rule"})
	}
	p := &PD{
		Requests: counter("loxilb_ai_pd_requests_total",
			"P/D requests by rule, model, the phase that decided the outcome and status.", "rule", "model", "phase", "status"),
		RoomRetries: counter("loxilb_pd_sg_room_retry_total",
			"SGLang pair retries with a fresh bootstrap room after a prefill connection died.", "rule"),
		TRTEarlyExits: counter("loxilb_pd_trt_ctx_early_exit_total",
			"TensorRT-LLM requests completed by the context step without a generation leg.", "rule"),
		KVTransferFailures: counter("loxilb_pd_kv_transfer_failure_total",
			"Decode legs sent without KV transfer parameters (the decode recomputes the prompt).", "rule"),
		PrefillDeaths: counter("loxilb_pd_prefill_ep_died_total",
			"Prefill legs whose connection could not be made or died before the response completed.", "rule"),
		DecodeDeaths: counter("loxilb_pd_decode_ep_died_total",
			"Decode legs whose connection could not be made or died before the response completed.", "rule"),
		Failovers: counter("loxilb_pd_connect_failover_total",
			"Prefill legs retried on another prefill endpoint.", "rule"),
		PrefillDuration: hist("loxilb_ai_pd_prefill_duration_seconds",
			"Prefill leg duration: dispatch to complete prefill response."),
		DecodeTTFB: hist("loxilb_ai_pd_decode_ttfb_seconds",
			"Decode leg time to first response byte, from decode dispatch."),
		Duration: hist("loxilb_ai_pd_request_duration_seconds",
			"Whole P/D request duration as seen by the gateway."),
		LegRequests: counter("infergate_pd_leg_requests_total",
			"P/D upstream legs by endpoint, phase (prefill, decode) and engine HTTP status (none: no answer).", "rule", "endpoint", "phase", "status"),
		LadderDecisions: counter("infergate_ladder_decisions_total",
			"P/D ladder steps by tier, outcome (hit, miss) and reason.", "rule", "tier", "outcome", "reason"),
		SessionHits: counter("loxilb_ai_pd_session_hits_total",
			"P/D requests routed by a live Tier 0 session pin.", "rule"),
		FallbackToNormal: counter("loxilb_pd_fallback_to_normal_total",
			"P/D requests served unsplit by a role-0 endpoint because no usable prefill/decode pair existed.", "rule"),

		// Edge hardening.
		ClientTransferState: counter("infergate_pd_client_transfer_state_total",
			"Client attempts to set engine transfer state on a P/D rule, by action (request_id_rejected, field_stripped).", "rule", "action"),
		DecodeFailovers: counter("infergate_pd_decode_failovers_total",
			"P/D decode legs re-sent to another decode after a connect failure (the engine never got the request).", "rule"),

		Unsplit: counter("infergate_pd_unsplit_requests_total",
			"Requests a P/D rule served on one endpoint without the P/D sequence, by path and reason.", "rule", "path", "reason"),
		HandoffInvalid: counter("infergate_pd_handoff_invalid_total",
			"Prefill answers whose KV transfer parameters were malformed; answered 502 pd_handoff_invalid without a decode leg.", "rule"),
		ClientTTFT: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "infergate_pd_client_ttft_seconds",
			Help:    "P/D time to first token as the client sees it: request arrival to the first body byte of a 2xx answer.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14), // 5 ms … 41 s
		}, []string{"rule", "model"}),
		KVConnector: counter("infergate_pd_kv_connector_total",
			"vLLM P/D requests by the KV connector sequence they ran (nixl, mooncake, moriio).", "rule", "connector"),
	}
	reg.MustRegister(p.Requests, p.RoomRetries, p.TRTEarlyExits, p.KVTransferFailures,
		p.PrefillDeaths, p.DecodeDeaths, p.Failovers, p.PrefillDuration, p.DecodeTTFB, p.Duration,
		p.LegRequests, p.LadderDecisions, p.SessionHits, p.FallbackToNormal,
		p.ClientTransferState, p.DecodeFailovers, p.Unsplit, p.HandoffInvalid, p.ClientTTFT, p.KVConnector)
	return p
}

// NewPD registers the P/D family on reg; for packages that test their
// metrics in isolation.
func NewPD(reg prometheus.Registerer) *PD { return newPD(reg) }
