package enginestats

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestParseEngines reads one exposition per engine version (written from
// the engines' metric definitions: names, labels, DP/TP series, histograms
// and counters around the families we read).
func TestParseEngines(t *testing.T) {
	tests := []struct {
		file, engine string
		want         Sample
		wantErr      string
	}{
		{"vllm-0.6.txt", EngineVLLM, Sample{Waiting: 3, Running: 14, KVUsage: 0.4375, Completed: 2987,
			LoRA: &LoRA{Running: []string{"sql-lora", "chat-lora"}, Waiting: []string{"tool-lora"}, Max: 4}}, ""},
		{"vllm-0.10.txt", EngineVLLM, Sample{Waiting: 5, Running: 16, KVUsage: 0.83, Completed: 2380,
			LoRA: &LoRA{Max: 1}}, ""},
		{"sglang-0.4.txt", EngineSGLang, Sample{Waiting: 2, Running: 28, KVUsage: 0.28, Completed: 21}, ""},
		{"sglang-0.5.txt", EngineSGLang, Sample{Waiting: 17, Running: 11, KVUsage: 0.97, Completed: 5310}, ""},
		{"trtllm-1.2.txt", EngineTRTLLM, Sample{Waiting: 6, Running: 32, KVUsage: 0.5546875, Completed: 977}, ""},
		{"trtllm-1.1.txt", EngineTRTLLM, Sample{}, ReasonNoSignal}, // request histograms only
		{"llamacpp.txt", EngineLlamaCpp, Sample{Waiting: 1, Running: 2, KVUsage: 0.125}, ""},
		{"vllm-0.10.txt", EngineSGLang, Sample{}, ReasonNoSignal}, // the rule names another engine
		{"vllm-0.10.txt", "", Sample{Waiting: 5, Running: 16, KVUsage: 0.83, Completed: 2380, LoRA: &LoRA{Max: 1}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.file+"/"+tt.engine, func(t *testing.T) {
			body, err := os.ReadFile(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			// The fixture itself must be valid exposition text.
			if _, err := textParse(strings.NewReader(string(body))); err != nil {
				t.Fatalf("fixture is not valid exposition: %v", err)
			}
			got, err := Parse(body, DialectFor(tt.engine))
			if tt.wantErr != "" {
				if reason(err) != tt.wantErr {
					t.Fatalf("err = %v, want reason %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got.has, got.loraStamp = 0, 0
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v (lora %+v)\nwant %+v (lora %+v)", got, got.LoRA, tt.want, tt.want.LoRA)
			}
		})
	}
}

func reason(err error) string {
	if pe, ok := err.(*ParseError); ok {
		return pe.Reason
	}
	return fmt.Sprint(err)
}

// TestParseBadInput: every malformed or implausible body is refused with a
// reason, never a panic, never half a sample.
func TestParseBadInput(t *testing.T) {
	tests := []struct {
		name, body, want string
	}{
		{"json drain", `[{"gpuMemUsage":1,"numQueuedRequests":3}]`, ReasonParse},
		{"html", "<html><body>404</body></html>", ReasonParse},
		{"binary", "\x00\x01\x02\xff", ReasonParse},
		{"name without value", "vllm:num_requests_waiting\n", ReasonParse},
		{"value not a number", "vllm:num_requests_waiting{} abc\n", ReasonParse},
		{"unterminated labels", "vllm:num_requests_waiting{model=\"x 3\n", ReasonParse},
		{"NaN", "vllm:num_requests_waiting NaN\nvllm:num_requests_running 1\n", ReasonInvalid},
		{"+Inf", "vllm:num_requests_running +Inf\n", ReasonInvalid},
		{"negative", "vllm:num_requests_running -3\n", ReasonInvalid},
		{"kv percent not fraction", "vllm:kv_cache_usage_perc 87\n", ReasonInvalid},
		{"negative counter", "vllm:num_requests_running 1\nvllm:request_success_total -1\n", ReasonInvalid},
		{"empty", "", ReasonNoSignal},
		{"comments only", "# HELP x y\n# TYPE x gauge\n", ReasonNoSignal},
		{"other families", "process_cpu_seconds_total 12.5\n", ReasonNoSignal},
		{"lora only", `vllm:lora_requests_info{max_lora="1",running_lora_adapters="",waiting_lora_adapters=""} 1` + "\n", ReasonNoSignal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.body), DialectFor(EngineVLLM))
			if got := reason(err); got != tt.want {
				t.Errorf("reason = %q (%v), want %q", got, err, tt.want)
			}
		})
	}
}

// TestParseForms: the small variations real exporters emit.
func TestParseForms(t *testing.T) {
	tests := []struct {
		name, body string
		waiting    float64
	}{
		{"no labels", "vllm:num_requests_waiting 4\n", 4},
		{"timestamp", "vllm:num_requests_waiting{a=\"b\"} 4 1712345678000\n", 4},
		{"crlf", "vllm:num_requests_waiting 4\r\n", 4},
		{"tab separated", "vllm:num_requests_waiting\t4\n", 4},
		{"escaped quote and brace in label", `vllm:num_requests_waiting{m="a\"}b"} 4` + "\n", 4},
		{"exponent", "vllm:num_requests_waiting 4e0\n", 4},
		{"openmetrics EOF", "vllm:num_requests_waiting 4\n# EOF\n", 4},
		{"no trailing newline", "vllm:num_requests_waiting 4", 4},
		{"prefix of a known name", "vllm:num_requests_waiting_by_reason 9\nvllm:num_requests_waiting 4\n", 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Parse([]byte(tt.body), DialectFor(EngineVLLM))
			if err != nil || s.Waiting != tt.waiting {
				t.Errorf("Parse = %+v, %v; want waiting %v", s, err, tt.waiting)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	for _, name := range []string{"vllm-0.6.txt", "sglang-0.5.txt", "trtllm-1.2.txt"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		s, err := Parse(body, DialectFor(EngineVLLM))
		if err == nil && (s.Waiting < 0 || s.Running < 0 || s.KVUsage < 0 || s.KVUsage > 1 || !s.Signal()) {
			t.Fatalf("accepted an implausible sample %+v", s)
		}
	})
}

// bigVLLM is a vLLM V1 exposition of realistic size: the load gauges among
// the request histograms of two DP engines (~30 KiB per engine).
func bigVLLM() []byte {
	var b strings.Builder
	les := []string{"0.001", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08", "0.1", "0.25", "0.5", "0.75", "1.0", "2.5", "5.0", "7.5", "10.0", "20.0", "40.0", "80.0", "160.0", "640.0", "2560.0", "+Inf"}
	hists := []string{"time_to_first_token_seconds", "inter_token_latency_seconds", "e2e_request_latency_seconds", "request_queue_time_seconds",
		"request_inference_time_seconds", "request_prefill_time_seconds", "request_decode_time_seconds", "request_prompt_tokens", "request_generation_tokens", "iteration_tokens_total"}
	for _, h := range hists {
		fmt.Fprintf(&b, "# HELP vllm:%s Histogram.\n# TYPE vllm:%s histogram\n", h, h)
		for e := range 2 {
			for _, le := range les {
				fmt.Fprintf(&b, "vllm:%s_bucket{engine=\"%d\",le=\"%s\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 1234.0\n", h, e, le)
			}
			fmt.Fprintf(&b, "vllm:%s_count{engine=\"%d\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 1234.0\n", h, e)
			fmt.Fprintf(&b, "vllm:%s_sum{engine=\"%d\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 5678.9\n", h, e)
		}
	}
	for _, g := range []string{"num_requests_running", "num_requests_waiting", "kv_cache_usage_perc"} {
		fmt.Fprintf(&b, "# HELP vllm:%s Gauge.\n# TYPE vllm:%s gauge\n", g, g)
		for e := range 2 {
			fmt.Fprintf(&b, "vllm:%s{engine=\"%d\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 0.5\n", g, e)
		}
	}
	return []byte(b.String())
}

func BenchmarkParse(b *testing.B) {
	body := bigVLLM()
	d := DialectFor(EngineVLLM)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(body, d); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseExpfmt is the same body through expfmt, the alternative the
// hand parser was measured against.
func BenchmarkParseExpfmt(b *testing.B) {
	body := bigVLLM()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := textParse(strings.NewReader(string(body))); err != nil {
			b.Fatal(err)
		}
	}
}

func textParse(r *strings.Reader) (any, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(r)
}
