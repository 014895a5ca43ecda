package pd

import (
	"context"
	"net/http"

	"github.com/infergate/infergate/datapath/upstream"
	"github.com/infergate/infergate/spec"
)

// vllm is the vLLM NIXL sequence: a one-token prefill that keeps its KV
// blocks, then the client's original request to decode with the prefill's
// kv_transfer_params so decode pulls the blocks instead of recomputing.
type vllm struct{ opts Options }

func (d *vllm) Serve(ctx context.Context, w http.ResponseWriter, req *Request, pair Pair, s upstream.Sender) Outcome {
	return serve(&seq{ctx: ctx, w: w, req: req, pair: pair, s: s, opts: d.opts}, spec.EngineVLLM, runVLLM)
}

// vllmTransferFields is vLLM's client transfer state (read-only).
var vllmTransferFields = []string{fieldKVTransferParams}

func (*vllm) TransferFields() []string { return vllmTransferFields }

// vllmAdminPaths are vLLM's operator APIs (dev-mode, profiler, LoRA and
// elastic-EP routers of its OpenAI server, and the RL weight-sync ones):
// each changes or reveals engine state for every tenant (read-only).
var vllmAdminPaths = []string{
	"/sleep", "/wake_up", "/is_sleeping",
	"/collective_rpc", "/server_info",
	"/reset_prefix_cache", "/reset_mm_cache", "/reset_encoder_cache",
	"/start_profile", "/stop_profile",
	"/scale_elastic_ep", "/is_scaling_elastic_ep",
	"/v1/load_lora_adapter", "/v1/unload_lora_adapter",
	"/pause", "/resume", "/is_paused",
	"/init_weight_transfer_engine", "/init_weight_transfer",
	"/start_weight_update", "/update_weights", "/finish_weight_update",
	"/abort_requests",
}

// Split: the NIXL transfer works on the OpenAI generation APIs; any other
// (the Anthropic /v1/messages request model carries no kv_transfer_params)
// goes to a decode, which computes the prompt itself.
func (*vllm) Split(path string) Split {
	switch path {
	case pathCompletions, pathChatCompletions, pathResponses:
		return Split{Sequence: true}
	}
	return Split{Role: spec.RoleDecode}
}

// runVLLM is the sequence: prefill (with one failover), then decode with
// the prefill's params, or decode alone for shapes one transfer cannot
// serve.
func runVLLM(q *seq) {
	req, o := q.req, q.o
	suffix := idSuffix(req.RequestID)
	if shape := multiShape(&q.obj, req.Path); shape != "" {
		// vLLM's transfer is single-consumer: several samples or prompts
		// cannot share one prefill's blocks. Decode computes the prompt.
		o.PrefillSkipped = shape
		body := vllmDecodeBody(&q.obj, nil)
		q.serveDecode(func(decode spec.Endpoint) upstream.Leg {
			h := legHeader(req.Header)
			h.Set(headerRequestID, suffix)
			return upstream.Leg{Endpoint: decode, Path: req.Path, Header: h, Body: body}
		})
		return
	}
	prefillBody := vllmPrefillBody(&q.obj, req.Path)
	build := func(prefill spec.Endpoint) upstream.Leg {
		h := legHeader(req.Header)
		h.Set(headerRequestID, vllmRequestID(prefill, q.pair.Decode, suffix))
		return upstream.Leg{Endpoint: prefill, Path: req.Path, Header: h, Body: prefillBody}
	}
	r, prefill, ok, done := q.prefillWithFailover(build, prefillWords{leg: "prefill", fallback: "decode recomputes"})
	if done {
		return
	}
	var params []byte
	if ok {
		var err error
		if params, err = vllmHandoff(r.body); err != nil {
			q.handoffInvalid(prefill.ID, err)
			return
		}
		o.KVTransferFailed = params == nil
	}

	body := vllmDecodeBody(&q.obj, params)
	// The prefill's params name the prefill's blocks, so any decode can
	// pull them; the id names the decode actually sent to.
	q.serveDecode(func(decode spec.Endpoint) upstream.Leg {
		h := legHeader(req.Header)
		h.Set(headerRequestID, vllmRequestID(prefill, decode, suffix))
		return upstream.Leg{Endpoint: decode, Path: req.Path, Header: h, Body: body}
	})
}
