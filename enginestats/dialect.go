package enginestats

import (
	"net/url"
	"strings"
)

// Field is what one exported family tells about an engine's load.
type Field uint8

// Fields the parsers fill.
const (
	// FieldWaiting: requests queued in the engine, not yet scheduled.
	FieldWaiting Field = iota + 1
	// FieldRunning: requests in the engine's running batch.
	FieldRunning
	// FieldKVUsage: fraction (0..1) of the KV cache in use.
	FieldKVUsage
	// FieldLoRA: vLLM's info gauge naming running/waiting adapters.
	FieldLoRA
	// FieldCompleted: a counter of finished requests, watched only to see
	// an engine restart (it goes backwards).
	FieldCompleted
)

// Family maps one exported metric name to the Field it fills.
type Family struct {
	Name  string
	Field Field
}

// Dialect is one engine's metric vocabulary and where it serves it.
type Dialect struct {
	Engine string
	// Path is the exposition path when the rule names none. TensorRT-LLM's
	// /metrics is a JSON drain of iteration stats (reading it steals them
	// from other consumers); its Prometheus text is at /prometheus/metrics.
	Path     string
	Families []Family
}

// Engine names (the rules' kvEngineType values).
const (
	EngineVLLM     = "vllm"
	EngineSGLang   = "sglang"
	EngineTRTLLM   = "trtllm"
	EngineLlamaCpp = "llamacpp"
)

// DefaultPath is the exposition path of engines without a table entry.
const DefaultPath = "/metrics"

// dialects is the read-only table of every engine's families. Several names
// may fill one field (an engine renamed a family across versions); a body
// normally carries only one of them. Adding an engine is adding a row.
var dialects = [...]Dialect{
	{Engine: EngineVLLM, Path: DefaultPath, Families: []Family{
		{"vllm:num_requests_waiting", FieldWaiting},
		{"vllm:num_requests_running", FieldRunning},
		{"vllm:kv_cache_usage_perc", FieldKVUsage},  // V1 engine (0.9+); a fraction despite the name
		{"vllm:gpu_cache_usage_perc", FieldKVUsage}, // V0 engine and V1 before the rename
		{"vllm:lora_requests_info", FieldLoRA},
		{"vllm:request_success_total", FieldCompleted},
	}},
	{Engine: EngineSGLang, Path: DefaultPath, Families: []Family{
		{"sglang:num_queue_reqs", FieldWaiting},
		{"sglang:num_running_reqs", FieldRunning},
		{"sglang:token_usage", FieldKVUsage},
		{"sglang:num_requests_total", FieldCompleted},
	}},
	{Engine: EngineTRTLLM, Path: "/prometheus/metrics", Families: []Family{
		{"trtllm_num_requests_waiting", FieldWaiting},
		{"trtllm_num_requests_running", FieldRunning},
		{"trtllm_kv_cache_utilization", FieldKVUsage},
		{"trtllm_num_requests_completed_total", FieldCompleted},
		// Dynamo re-exports TensorRT-LLM's families with a colon prefix.
		{"trtllm:num_requests_waiting", FieldWaiting},
		{"trtllm:num_requests_running", FieldRunning},
		{"trtllm:kv_cache_utilization", FieldKVUsage},
	}},
	{Engine: EngineLlamaCpp, Path: DefaultPath, Families: []Family{
		{"llamacpp:requests_deferred", FieldWaiting},
		{"llamacpp:requests_processing", FieldRunning},
		{"llamacpp:kv_cache_usage_ratio", FieldKVUsage},
	}},
}

// DialectFor returns the table of engine e ("" is vLLM, as for rules). An
// unknown engine matches no family: it gives no signal.
func DialectFor(e string) *Dialect {
	if e == "" {
		e = EngineVLLM
	}
	for i := range dialects {
		if dialects[i].Engine == e {
			return &dialects[i]
		}
	}
	return &Dialect{Engine: e, Path: DefaultPath}
}

// query is the name[] filter of d's families ("?name[]=…&name[]=…", ""
// for a dialect without families). Python's prometheus_client (vLLM,
// SGLang, TensorRT-LLM) then renders only those samples instead of every
// histogram: for the two-engine vLLM exposition TestScrapeCost serves,
// 526 bytes of samples (plus their HELP and TYPE lines) instead of 58 KiB
// per scrape. Servers that ignore the query (llama.cpp) send everything;
// the parser copes.
func (d *Dialect) query() string {
	if len(d.Families) == 0 {
		return ""
	}
	var b strings.Builder
	for i, f := range d.Families {
		if i == 0 {
			b.WriteString("?")
		} else {
			b.WriteString("&")
		}
		b.WriteString("name%5B%5D=")
		b.WriteString(url.QueryEscape(f.Name))
	}
	return b.String()
}

// match returns the field of the family line is a sample of (0: none of
// d's) and the length of its name. A family matches when the line starts
// with its name followed by a label set, a blank or the end of the line.
// The byte after the name rejects nearly every other line at once, so a
// long exposition costs about one comparison per family and line.
func (d *Dialect) match(line []byte) (Field, int) {
	for _, f := range d.Families {
		n := len(f.Name)
		if len(line) < n || (len(line) > n && line[n] != '{' && line[n] != ' ' && line[n] != '\t') {
			continue
		}
		if string(line[:n]) == f.Name {
			return f.Field, n
		}
	}
	return 0, 0
}
