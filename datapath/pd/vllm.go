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
type vllm struct {
	opts Options
}

func (d *vllm) Serve(ctx context.Context, w http.ResponseWriter, req *Request, pair Pair, s upstream.Sender) Outcome {
	return serve(&seq{ctx: ctx, w: w, req: req, pair: pair, s: s, opts: d.opts, bodies: d.opts.Buffers}, spec.EngineVLLM, runVLLM)
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
// serve. The pair's connector chooses the sequence (NIXL's below).
func runVLLM(q *seq) {
	conn := vllmConnector(q.pair)
	q.o.Connector = conn.String()
	if conn == connMoRIIO {
		runMoRIIO(q) // refuses what it cannot hand off: its decode never recomputes
		return
	}
	req, o := q.req, q.o
	suffix := idSuffix(req.RequestID)
	if shape := multiShape(&q.obj, req.Path); shape != "" {
		// vLLM's transfer is single-consumer: several samples or prompts
		// cannot share one prefill's blocks. Decode computes the prompt.
		o.PrefillSkipped = shape
		q.vllmDecode(nil, suffix)
		return
	}
	if conn == connMooncake {
		runMooncake(q, suffix)
		return
	}
	// Room for the decode body, which reuses this buffer (below). Both legs'
	// sends have returned when runVLLM does, so the buffer goes back then.
	prefillBody := vllmPrefillBodyInto(q.bodies.Get(decodeRoom(len(q.obj.raw))), &q.obj, req.Path, vllmPrefillParams)
	last := prefillBody
	defer func() { q.bodies.Put(last) }()
	build := func(prefill spec.Endpoint) upstream.Leg {
		return q.vllmLeg(prefill, vllmRequestID(prefill, q.pair.Decode, suffix), prefillBody)
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

	// Every prefill send has returned, so the decode body takes over the
	// prefill body's buffer rather than allocating a second prompt-sized one.
	body := vllmDecodeBodyInto(prefillBody, &q.obj, params)
	last = body
	// The prefill's params name the prefill's blocks, so any decode can
	// pull them; the id names the decode actually sent to.
	q.serveDecode(func(decode spec.Endpoint) upstream.Leg {
		return q.vllmLeg(decode, vllmRequestID(prefill, decode, suffix), body)
	})
}

// vllmLeg is one vLLM leg: the client's header with X-Request-Id id, on the
// client's path. Every connector's legs are built here; they differ only in
// the id (NIXL's names both peers) and the body.
func (q *seq) vllmLeg(ep spec.Endpoint, id string, body []byte) upstream.Leg {
	h := legHeader(q.req.Header)
	h.Set(headerRequestID, id)
	return upstream.Leg{Endpoint: ep, Path: q.req.Path, Header: h, Body: body}
}

// vllmDecode serves the decode leg (with decode failover) under one request
// id for every decode: the client's body with kv_transfer_params set to
// params, or removed when params is nil (the decode computes the prompt).
func (q *seq) vllmDecode(params []byte, id string) {
	body := vllmDecodeBody(&q.obj, params)
	q.serveDecode(func(d spec.Endpoint) upstream.Leg { return q.vllmLeg(d, id, body) })
}

// vllmPrefillBody rewrites a client body into a vLLM NIXL prefill request:
// generate one token, no streaming, one choice, and ask the engine to hold
// the KV for a remote decode. min_tokens is dropped (it would contradict the
// cap of 1), any client kv_transfer_params is replaced and every other
// client transfer field is dropped (applyOwn). The one token must end by
// the cap: vLLM's connector returns transfer params only for a
// length-capped finish, so an EOS or a client stop string on the first
// token would leave the decode without a handoff. The prefill therefore
// ignores EOS and carries no stop conditions; the decode leg keeps the
// client's.
func vllmPrefillBody(o *object, path string) []byte {
	return vllmPrefillBodyWith(o, path, vllmPrefillParams)
}

// vllmPrefillBodyWith is vllmPrefillBody with the connector's own prefill
// kv_transfer_params (Mooncake and MoRI-IO add a transfer id and peers).
func vllmPrefillBodyWith(o *object, path string, params []byte) []byte {
	return vllmPrefillBodyInto(nil, o, path, params)
}

// vllmPrefillBodyInto is vllmPrefillBodyWith written into buf's memory when
// it fits (applyOwnInto).
func vllmPrefillBodyInto(buf []byte, o *object, path string, params []byte) []byte {
	if isResponses(path) {
		return vllmResponsesPrefillBody(buf, o, params)
	}
	var e [12]edit
	edits := e[:0]
	_, hasMCT := o.lookup(fieldMaxCompletionTokens)
	_, hasMT := o.lookup(fieldMaxTokens)
	if hasMCT && isChat(path) {
		edits = append(edits, edit{fieldMaxCompletionTokens, jsonOne})
		if hasMT {
			edits = append(edits, edit{fieldMaxTokens, jsonOne})
		}
	} else {
		edits = append(edits, edit{fieldMaxTokens, jsonOne})
		if hasMCT {
			edits = append(edits, edit{fieldMaxCompletionTokens, jsonOne})
		}
	}
	edits = append(edits,
		edit{fieldMinTokens, nil},
		edit{fieldStreamOptions, nil},
		edit{fieldStream, jsonFalse},
		edit{fieldN, jsonOne},
		edit{fieldIgnoreEOS, jsonTrue},
		edit{fieldStop, nil},
		edit{fieldStopTokenIDs, nil},
		edit{fieldIncludeStopStrInOutput, nil},
		edit{fieldKVTransferParams, params},
	)
	return o.applyOwnInto(buf, edits)
}

// vllmResponsesPrefillBody is vllmPrefillBody for the Responses API: the
// cap is max_output_tokens (the API has no max_tokens or n), and the
// prefill's one-token answer is neither stored nor run in the background
// (a background prefill would answer "queued" without transfer params).
// Client transfer fields are dropped as on every other leg (applyOwn).
func vllmResponsesPrefillBody(buf []byte, o *object, params []byte) []byte {
	return o.applyOwnInto(buf, []edit{
		{fieldMaxOutputTokens, jsonOne},
		{fieldStreamOptions, nil},
		{fieldStream, jsonFalse},
		{fieldStore, jsonFalse},
		{fieldBackground, jsonFalse},
		{fieldKVTransferParams, params},
	})
}

// vllmDecodeBody is the client's body with kv_transfer_params replaced by
// the prefill's params verbatim, or removed when params is nil (recompute:
// a client-supplied do_remote_prefill would make decode pull blocks that do
// not exist).
func vllmDecodeBody(o *object, params []byte) []byte {
	return vllmDecodeBodyInto(nil, o, params)
}

// vllmDecodeBodyInto is vllmDecodeBody written into buf's memory when it
// fits (applyOwnInto): buf must be a leg body no send still reads.
func vllmDecodeBodyInto(buf []byte, o *object, params []byte) []byte {
	return o.applyOwnInto(buf, []edit{{fieldKVTransferParams, params}})
}

// decodeRoom is the capacity a NIXL prefill body is allocated with so that
// the decode body, which takes over its buffer, fits too: the client body
// plus the prefill's kv_transfer_params. Those grow with the prompt (one
// block id of a few digits per KV block, a block holding 16 or more tokens
// of about four bytes each), so an eighth of the body plus 1 KiB for the
// fixed fields covers them; a larger reply only costs the allocation the
// reuse would have saved.
func decodeRoom(body int) int { return body + body/8 + 1<<10 }
