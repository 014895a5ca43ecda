package swagger

import "encoding/json"

// Example is a named, worked request body. Each one is decoded and compiled
// by a test, so an example that stops being valid fails the build. Addresses
// are loopback ones (127.0.0.50-62, clear of the demo's and configs/'), so
// executing an example in Swagger UI creates a rule on a default daemon.
type Example struct {
	Name string
	Body json.RawMessage
}

// exampleVLLMPD is the canonical example: vLLM prefill/decode, one prefill
// and one decode worker (1P1D), with KV-exact routing over the prefill pool.
const exampleVLLMPD = `{
  "serviceArguments": {
    "externalIP": "127.0.0.50",
    "port": 2020,
    "protocol": "tcp",
    "sel": 0,
    "mode": 4,
    "name": "llm-pd-vllm",
    "monitor": true,
    "probetype": "http",
    "probeport": 8000,
    "probereq": "/health",
    "sse_mode": true,
    "cb_enable": true,
    "pd_disagg_mode": true,
    "pd_cache_aware_mode": true,
    "kvExactMode": 1,
    "kvEngineType": "vllm",
    "kvBlockSize": 16
  },
  "endpoints": [
    {"endpointIP": "127.0.0.54", "targetPort": 8000, "weight": 1, "ep_role": 1, "nixl_port": 5600},
    {"endpointIP": "127.0.0.55", "targetPort": 8000, "weight": 1, "ep_role": 2, "nixl_port": 5601}
  ]
}`

// exampleSGLangPD is SGLang's concurrent P/D with its bootstrap port.
const exampleSGLangPD = `{
  "serviceArguments": {
    "externalIP": "127.0.0.51",
    "port": 3030,
    "protocol": "tcp",
    "sel": 0,
    "mode": 4,
    "name": "llm-pd-sglang",
    "sse_mode": true,
    "pd_disagg_mode": true,
    "kvEngineType": "sglang",
    "pdBootstrapPort": 8998
  },
  "endpoints": [
    {"endpointIP": "127.0.0.56", "targetPort": 30000, "weight": 1, "ep_role": 1},
    {"endpointIP": "127.0.0.57", "targetPort": 30000, "weight": 1, "ep_role": 2}
  ]
}`

// examplePlainModel is a single (non-P/D) pool routed by model name, least
// connections.
const examplePlainModel = `{
  "serviceArguments": {
    "externalIP": "127.0.0.52",
    "port": 8080,
    "protocol": "tcp",
    "sel": 4,
    "mode": 4,
    "name": "llama-pool",
    "model_name": "meta-llama/Llama-3.1-8B-Instruct",
    "sse_mode": true
  },
  "endpoints": [
    {"endpointIP": "127.0.0.58", "targetPort": 8000, "weight": 1},
    {"endpointIP": "127.0.0.59", "targetPort": 8000, "weight": 1}
  ]
}`

// exampleCHWBL is a single pool with prefix affinity by consistent hashing
// with bounded loads (sel 8).
const exampleCHWBL = `{
  "serviceArguments": {
    "externalIP": "127.0.0.53",
    "port": 8080,
    "protocol": "tcp",
    "sel": 8,
    "mode": 4,
    "name": "chwbl-pool",
    "sse_mode": true,
    "chwbl_prefix_hash_level": 2,
    "chwbl_mean_load_factor": 150
  },
  "endpoints": [
    {"endpointIP": "127.0.0.60", "targetPort": 8000, "weight": 1},
    {"endpointIP": "127.0.0.61", "targetPort": 8000, "weight": 1},
    {"endpointIP": "127.0.0.62", "targetPort": 8000, "weight": 1}
  ]
}`

// Examples returns every documented POST body, the canonical one first.
func Examples() []Example {
	return []Example{
		{Name: "vllm-pd-1p1d", Body: json.RawMessage(exampleVLLMPD)},
		{Name: "sglang-pd-1p1d", Body: json.RawMessage(exampleSGLangPD)},
		{Name: "model-routed-least-conn", Body: json.RawMessage(examplePlainModel)},
		{Name: "chwbl-prefix-affinity", Body: json.RawMessage(exampleCHWBL)},
	}
}
