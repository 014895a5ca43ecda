package enginestats

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

// TestParseBatchLimit reads each engine's real answer shape (testdata,
// written from the engines' own handlers and documented examples) and the
// garbage an engine might send instead.
func TestParseBatchLimit(t *testing.T) {
	tests := []struct {
		name  string
		parse func([]byte) (BatchLimit, error)
		file  string // testdata fixture, or
		body  string // an inline body
		want  BatchLimit
	}{
		{"SGLang /server_info", ParseServerInfo, "sglang-server-info.json", "", BatchLimit{128, SourceSGLang}},
		{"SGLang DP attention: ranks summed", ParseServerInfo, "sglang-server-info-dp2.json", "", BatchLimit{104, SourceSGLang}},
		{"SGLang 0.4 /get_server_info: server arg", ParseServerInfo, "sglang-get-server-info-0.4.json", "", BatchLimit{48, SourceSGLang}},
		{"vLLM dev-mode JSON config", ParseServerInfo, "vllm-server-info.json", "", BatchLimit{256, SourceVLLM}},
		{"vLLM DP 4 behind one API server", ParseServerInfo, "vllm-server-info-dp4.json", "", BatchLimit{256, SourceVLLM}},
		{"vLLM text config: nothing", ParseServerInfo, "vllm-server-info-text.json", "", BatchLimit{}},
		{"llm-d-inference-sim /admin/config", ParseSimConfig, "llm-d-inference-sim-admin-config.json", "", BatchLimit{5, SourceSim}},
		{"TensorRT-LLM Prometheus", ParseTRTLLMProm, "trtllm-prometheus-max-active.txt", "", BatchLimit{2048, SourceTRTLLM}},
		{"TensorRT-LLM 1.1 (no such gauge)", ParseTRTLLMProm, "trtllm-1.1.txt", "", BatchLimit{}},
		{"TensorRT-LLM under Dynamo", ParseTRTLLMProm, "", "trtllm:max_num_active_requests 64\n", BatchLimit{64, SourceTRTLLM}},
		{"vLLM external LB: own core only", ParseServerInfo, "", `{"vllm_config":{"parallel_config":{"data_parallel_size":4,"data_parallel_external_lb":true},"scheduler_config":{"max_num_seqs":32}}}`, BatchLimit{32, SourceVLLM}},
		{"vLLM hybrid LB: local cores", ParseServerInfo, "", `{"vllm_config":{"parallel_config":{"data_parallel_size":8,"data_parallel_size_local":2,"data_parallel_hybrid_lb":true},"scheduler_config":{"max_num_seqs":32}}}`, BatchLimit{64, SourceVLLM}},
		// Garbage: ignored, never a limit.
		{"not JSON", ParseServerInfo, "", `<html>502</html>`, BatchLimit{}},
		{"string limit", ParseServerInfo, "", `{"max_running_requests":"128"}`, BatchLimit{}},
		{"fractional limit", ParseServerInfo, "", `{"max_running_requests":12.5}`, BatchLimit{}},
		{"zero limit", ParseServerInfo, "", `{"max_running_requests":0}`, BatchLimit{}},
		{"negative limit", ParseServerInfo, "", `{"max_running_requests":-4}`, BatchLimit{}},
		{"absurd limit", ParseServerInfo, "", `{"max_running_requests":1e9}`, BatchLimit{}},
		{"null limit, no ranks", ParseServerInfo, "", `{"max_running_requests":null,"internal_states":[]}`, BatchLimit{}},
		{"one garbage rank: server arg instead", ParseServerInfo, "", `{"max_running_requests":96,"internal_states":[{"effective_max_running_requests_per_dp":48},{"effective_max_running_requests_per_dp":"x"}]}`, BatchLimit{96, SourceSGLang}},
		{"ranks summing past the bound", ParseServerInfo, "", `{"internal_states":[{"effective_max_running_requests_per_dp":65536},{"effective_max_running_requests_per_dp":1}]}`, BatchLimit{}},
		{"vLLM absurd DP", ParseServerInfo, "", `{"vllm_config":{"parallel_config":{"data_parallel_size":100000},"scheduler_config":{"max_num_seqs":256}}}`, BatchLimit{}},
		{"vLLM config without scheduler", ParseServerInfo, "", `{"vllm_config":{"model_config":{}}}`, BatchLimit{}},
		{"sim without max-num-seqs", ParseSimConfig, "", `{"port":8000}`, BatchLimit{}},
		{"TRT-LLM NaN", ParseTRTLLMProm, "", "trtllm_max_num_active_requests NaN\n", BatchLimit{}},
		{"TRT-LLM fraction", ParseTRTLLMProm, "", "trtllm_max_num_active_requests 2.5\n", BatchLimit{}},
		{"TRT-LLM longer name is another family", ParseTRTLLMProm, "", "trtllm_max_num_active_requests_total 8\n", BatchLimit{}},
		{"TRT-LLM unterminated labels", ParseTRTLLMProm, "", "trtllm_max_num_active_requests{a=\"b 8\n", BatchLimit{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := []byte(tc.body)
			if tc.file != "" {
				var err error
				if body, err = os.ReadFile("testdata/" + tc.file); err != nil {
					t.Fatal(err)
				}
			}
			got, err := tc.parse(body)
			if got != tc.want || (err == nil) != (tc.want.N > 0) {
				t.Fatalf("= %+v, %v; want %+v", got, err, tc.want)
			}
			if err != nil && !errors.Is(err, errNoLimit) {
				t.Fatalf("error %v does not say no usable limit", err)
			}
		})
	}
}

// TestFetchBatchLimit asks engines that tell their limit at different
// paths, and engines whose answers cannot be trusted.
func TestFetchBatchLimit(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	type paths map[string]string // path (with query) → body; others 404
	tests := []struct {
		name    string
		serve   paths
		slow    bool // the answer never finishes
		want    BatchLimit
		wantErr string
	}{
		{"SGLang", paths{"/server_info?config_format=json": read("sglang-server-info.json")}, false, BatchLimit{128, SourceSGLang}, ""},
		{"older SGLang", paths{"/get_server_info": read("sglang-get-server-info-0.4.json")}, false, BatchLimit{48, SourceSGLang}, ""},
		{"vLLM dev mode", paths{"/server_info?config_format=json": read("vllm-server-info.json")}, false, BatchLimit{256, SourceVLLM}, ""},
		{"llm-d-inference-sim", paths{"/admin/config": read("llm-d-inference-sim-admin-config.json")}, false, BatchLimit{5, SourceSim}, ""},
		{"TensorRT-LLM", paths{"/prometheus/metrics": read("trtllm-prometheus-max-active.txt")}, false, BatchLimit{2048, SourceTRTLLM}, ""},
		{"production vLLM tells nothing", paths{}, false, BatchLimit{}, "404"},
		{"garbage is the reason over 404s", paths{"/server_info?config_format=json": `{"max_running_requests":-1}`}, false, BatchLimit{}, "no max_running_requests"},
		{"garbage, then a good source", paths{"/server_info?config_format=json": `[]`, "/admin/config": `{"max-num-seqs":7}`}, false, BatchLimit{7, SourceSim}, ""},
		{"huge body", paths{"/server_info?config_format=json": `{"pad":"` + strings.Repeat("x", maxInfoBody) + `","max_running_requests":8}`}, false, BatchLimit{}, "size cap"},
		{"slow body", paths{"/server_info?config_format=json": ""}, true, BatchLimit{}, "deadline"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, ok := tc.serve[r.URL.RequestURI()]
				if !ok {
					http.NotFound(w, r)
					return
				}
				if tc.slow {
					w.Write([]byte(`{"max_running_requests":`))
					w.(http.Flusher).Flush()
					<-r.Context().Done()
					return
				}
				w.Write([]byte(body))
			}))
			defer srv.Close()
			bound := 5 * time.Second // a loaded host, under -race, reads a MiB slowly
			if tc.slow {
				bound = 300 * time.Millisecond
			}
			ctx, cancel := context.WithTimeout(context.Background(), bound)
			defer cancel()
			got, err := FetchBatchLimit(ctx, srv.Client(), srv.URL)
			if got != tc.want {
				t.Fatalf("= %+v, %v; want %+v", got, err, tc.want)
			}
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestShareOf: a replica's window is its share of the engine's limit,
// rounded up, never 0 for a known limit; a share out of (0, 1] is the
// default (the whole limit).
func TestShareOf(t *testing.T) {
	tests := []struct {
		share float64
		n     int
		want  int
	}{
		{1, 128, 128},
		{0.25, 256, 64},
		{0.25, 5, 2},    // 1.25 rounds up
		{1.0 / 3, 9, 3}, // no float dust: 3, not 4
		{0.01, 5, 1},
		{0, 16, 16},   // unset: the default share
		{1.5, 16, 16}, // out of range: the default share
		{-1, 16, 16},
		{0.5, 0, 0}, // nothing learned
	}
	for _, tc := range tests {
		o := DefaultOptions()
		o.WindowShare = tc.share
		if got := o.ShareOf(tc.n); got != tc.want {
			t.Errorf("share %v of %d = %d, want %d", tc.share, tc.n, got, tc.want)
		}
	}
	o := DefaultOptions()
	if o.LearnsWindows() {
		t.Error("windows learned by default")
	}
	o.LearnWindows = true
	if !o.LearnsWindows() {
		t.Error("LearnWindows on, not learned")
	}
	o.ModelsRefresh = -1
	if o.LearnsWindows() {
		t.Error("learned with the engine-fact reads turned off")
	}
}
