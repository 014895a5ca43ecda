package validate

// Hint is one row of the failure-diagnosis table (docs/operations.md): the
// symptom, then the causes to check, most likely first.
type Hint string

// The diagnosis table. Steps attach the rows that match their failure.
const (
	HintRuleCreation     Hint = "rule creation fails → check mode (4 = fullproxy), roles (ep_role 1 prefill / 2 decode, at least one of each with weight > 0), engine-field coherence (kvEngineType vs nixl_port / pdBootstrapPort / kv* fields)"
	HintClientHangs      Hint = "client hangs → check request order (prefill answers before decode starts), role health (/status, probes), transfer reachability (NIXL side channel / SGLang bootstrap port between engines), first-byte timeouts (--prefill-timeout, --decode-first-byte-timeout, inactiveTimeOut)"
	HintDecodeRecomputes Hint = "decode recomputes → check the transfer configuration: engines started with --kv-transfer-config (NixlConnector, kv_both), matching nixl_port, prefill answers carrying kv_transfer_params (loxilb_pd_kv_transfer_failure_total)"
	HintKVZeroHits       Hint = "KV-exact hits stay zero → check tokenizer and model name, kvBlockSize = engine --block-size, kvHashAlgo = engine hash (sha256_cbor / xxhash_cbor), the event feed (kvZmqPort + rank, --kv-events-config), inventory readiness (trusted after kvWarmupSec)"
	HintRoleOverloaded   Hint = "one role overloaded → check endpoint health (/status), pd_session_ttl_sec pinning sessions, pd_balance_abs_threshold, prefill/decode role counts and weights"
	HintBreaker          Hint = "errors keep selecting one endpoint → check the circuit breaker (infergate_datapath_breaker_state, --breaker-* flags, cb_enable): the endpoint accepts connections but fails requests"
	HintProbePath        Hint = "a probe fails on one OpenAI path only → the engines serve (or stream on) the other: rerun with --path /v1/chat/completions or --path /v1/completions, and point clients at the path the engines support"
	HintEngineDown       Hint = "an endpoint refuses connections (connection refused) → engine not running or wrong IP:port: check the engine process is up and listening on endpointIP:targetPort (ss -ltnp), then the rule's --endpoints and the --tcp target port"
	HintEngineRefused    Hint = "the engine refuses the probe (4xx) → read its message: a prompt beyond max_model_len (engine --max-model-len), an unknown model name (--model), or a parameter it does not support; this is not a KV parity problem"
)

// DiagnosisTable lists every row, in the order docs/operations.md shows them.
func DiagnosisTable() []Hint {
	return []Hint{HintRuleCreation, HintClientHangs, HintDecodeRecomputes, HintKVZeroHits, HintRoleOverloaded, HintBreaker,
		HintProbePath, HintEngineRefused, HintEngineDown}
}
