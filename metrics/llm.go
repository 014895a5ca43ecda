package metrics

import "github.com/prometheus/client_golang/prometheus"

// Buckets sized for LLM requests: generations run for minutes, so the
// request and endpoint families reach 43 minutes and time to first token
// (long prompts queued behind others) ten; token gaps are milliseconds
// to seconds.
var (
	llmTTFTBuckets     = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320, 640}
	llmTokenBuckets    = []float64{0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.5, 5, 10}
	llmDurationBuckets = []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320, 640, 1280, 2560}
)

// Phase values of infergate_endpoint_request_duration_seconds.
const (
	EndpointPhaseServe   = "serve"   // the endpoint that answered the client
	EndpointPhasePrefill = "prefill" // a P/D prefill leg
)

// LLM is the client-side view of generations: what the client waited for
// the first token, between tokens and in all, per rule and model, and the
// time each endpoint held a request. `model` is bounded per rule (the
// rule's pinned model, else models the engines served up to a cap, else
// "other").
type LLM struct {
	TTFT     *HistogramVec // infergate_llm_time_to_first_token_seconds{rule,model}
	TPOT     *HistogramVec // infergate_llm_time_per_output_token_seconds{rule,model}
	ITL      *HistogramVec // infergate_llm_inter_token_latency_seconds{rule,model}
	Duration *HistogramVec // infergate_llm_request_duration_seconds{rule,model}
	Endpoint *HistogramVec // infergate_endpoint_request_duration_seconds{rule,endpoint,phase}
}

// NewLLM builds the LLM families and registers them on reg.
func NewLLM(reg prometheus.Registerer) *LLM {
	l := &LLM{
		TTFT: NewHistogramVec(prometheus.HistogramOpts{
			Name:    "infergate_llm_time_to_first_token_seconds",
			Help:    "Client-side time to first token: request arrival to the first response body byte written to the client (the first event of a stream), by rule and model.",
			Buckets: llmTTFTBuckets,
		}, []string{"rule", "model"}),
		TPOT: NewHistogramVec(prometheus.HistogramOpts{
			Name:    "infergate_llm_time_per_output_token_seconds",
			Help:    "Client-side time per output token of streamed answers: first to last event, over the output tokens after the first, by rule and model.",
			Buckets: llmTokenBuckets,
		}, []string{"rule", "model"}),
		ITL: NewHistogramVec(prometheus.HistogramOpts{
			Name:    "infergate_llm_inter_token_latency_seconds",
			Help:    "Client-side gaps between consecutive stream events written to the client, by rule and model.",
			Buckets: llmTokenBuckets,
		}, []string{"rule", "model"}),
		Duration: NewHistogramVec(prometheus.HistogramOpts{
			Name:    "infergate_llm_request_duration_seconds",
			Help:    "Request arrival to the last response byte, with buckets up to 43 minutes, by rule and model.",
			Buckets: llmDurationBuckets,
		}, []string{"rule", "model"}),
		Endpoint: NewHistogramVec(prometheus.HistogramOpts{
			Name:    "infergate_endpoint_request_duration_seconds",
			Help:    "Time an endpoint held a request: phase serve is arrival to the last byte for the endpoint that answered; phase prefill is a P/D prefill leg to its complete answer.",
			Buckets: llmDurationBuckets,
		}, []string{"rule", "endpoint", "phase"}),
	}
	reg.MustRegister(l.TTFT, l.TPOT, l.ITL, l.Duration, l.Endpoint)
	return l
}

// DeleteRule drops every series of a rule label.
func (l *LLM) DeleteRule(rule string) {
	m := prometheus.Labels{"rule": rule}
	l.TTFT.DeletePartialMatch(m)
	l.TPOT.DeletePartialMatch(m)
	l.ITL.DeletePartialMatch(m)
	l.Duration.DeletePartialMatch(m)
	l.Endpoint.DeletePartialMatch(m)
}

// DeleteEndpoint drops an endpoint's series of a rule.
func (l *LLM) DeleteEndpoint(rule, endpoint string) {
	l.Endpoint.DeletePartialMatch(prometheus.Labels{"rule": rule, "endpoint": endpoint})
}
