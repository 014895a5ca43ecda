package pdfake

import "net/http"

// Server info: where SGLang and vLLM tell their batch limit (the gateway
// learns its admission windows from it; enginestats/batchlimit.go). Each
// answer has the engine's own shape, reduced to the fields a reader of
// the limit looks at and a few around them:
//
//   - SGLang: GET /server_info (and the older /get_server_info) — server
//     arguments flattened, max_running_requests among them, and
//     internal_states, one per data-parallel rank, each with
//     effective_max_running_requests_per_dp.
//   - vLLM: GET /server_info exists only in dev mode
//     (VLLM_SERVER_DEV_MODE=1); with ?config_format=json, vllm_config is
//     the serialised VllmConfig (scheduler_config.max_num_seqs), otherwise
//     a one-line text.
//
// TRT-LLM fakes serve neither. Without MaxRunningRequests the paths are
// not served (404), as on a vLLM without dev mode.

// SetMaxRunningRequests changes the batch limit the engine reports (0:
// none: the paths answer 404), as an engine restarted with another
// --max-running-requests / --max-num-seqs would.
func (e *Engine) SetMaxRunningRequests(n int) { e.batch.Store(int64(n)) }

func (e *Engine) registerServerInfo(mux *http.ServeMux) {
	switch e.cfg.Dialect {
	case SGLang:
		mux.HandleFunc("GET /server_info", e.serveSGLangInfo)
		mux.HandleFunc("GET /get_server_info", e.serveSGLangInfo)
	case VLLM:
		mux.HandleFunc("GET /server_info", e.serveVLLMInfo)
	}
}

func (e *Engine) serveSGLangInfo(w http.ResponseWriter, r *http.Request) {
	n := e.batch.Load()
	if n <= 0 {
		http.NotFound(w, r)
		return
	}
	type state struct {
		LastGenThroughput float64 `json:"last_gen_throughput"`
		Effective         int64   `json:"effective_max_running_requests_per_dp"`
	}
	writeJSON(w, map[string]any{
		"model_path":           e.cfg.Model,
		"served_model_name":    e.cfg.Model,
		"max_running_requests": n,
		"max_queued_requests":  nil,
		"dp_size":              1,
		"disaggregation_mode":  sglangMode(e.cfg.Role),
		"status":               "ready",
		"internal_states":      []state{{LastGenThroughput: 0, Effective: n}},
		"version":              "0.0.0-pdfake",
	})
}

func (e *Engine) serveVLLMInfo(w http.ResponseWriter, r *http.Request) {
	n := e.batch.Load()
	if n <= 0 {
		http.NotFound(w, r)
		return
	}
	if r.URL.Query().Get("config_format") != "json" {
		writeJSON(w, map[string]any{"vllm_config": "model='" + e.cfg.Model + "', tensor_parallel_size=1, data_parallel_size=1"})
		return
	}
	writeJSON(w, map[string]any{
		"vllm_config": map[string]any{
			"model_config":     map[string]any{"model": e.cfg.Model, "max_model_len": e.window.Load()},
			"parallel_config":  map[string]any{"data_parallel_size": 1, "data_parallel_size_local": 1, "data_parallel_external_lb": false, "data_parallel_hybrid_lb": false},
			"scheduler_config": map[string]any{"max_num_seqs": n, "max_num_batched_tokens": 8192},
		},
		"vllm_env": map[string]any{"VLLM_SERVER_DEV_MODE": true},
	})
}

// sglangMode is SGLang's disaggregation_mode for a fake's role.
func sglangMode(r Role) string {
	switch r {
	case Prefill:
		return "prefill"
	case Decode:
		return "decode"
	}
	return "null"
}
