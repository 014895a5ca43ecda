package pdfake

import (
	"fmt"
	"net/http"
)

// serveMetrics answers GET /metrics in the Prometheus text format with the
// families the engine's own server exports for its load (the names and
// labels of vLLM's and SGLang's exporters; the gateway's engine scraper
// reads them). The fake holds no real KV cache, so its usage is 0.
func (e *Engine) serveMetrics(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	running, finished := e.running.Load(), e.finished.Load()
	model := e.cfg.Model
	switch e.cfg.Dialect {
	case SGLang:
		fmt.Fprintf(w, "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name=%q} %d\n", model, running)
		fmt.Fprintf(w, "# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{model_name=%q} 0\n", model)
		fmt.Fprintf(w, "# TYPE sglang:token_usage gauge\nsglang:token_usage{model_name=%q} 0\n", model)
		fmt.Fprintf(w, "# TYPE sglang:num_requests_total counter\nsglang:num_requests_total{model_name=%q} %d\n", model, finished)
	default:
		fmt.Fprintf(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=%q} %d\n", model, running)
		fmt.Fprintf(w, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=%q} 0\n", model)
		fmt.Fprintf(w, "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name=%q} 0\n", model)
		fmt.Fprintf(w, "# TYPE vllm:request_success_total counter\nvllm:request_success_total{finished_reason=\"stop\",model_name=%q} %d\n", model, finished)
	}
}
