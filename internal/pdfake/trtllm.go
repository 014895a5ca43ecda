package pdfake

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
)

// TensorRT-LLM disaggregated_params fields.
const (
	dpRequestType     = "request_type"
	dpFirstGenTokens  = "first_gen_tokens"
	dpCtxRequestID    = "ctx_request_id"
	dpOpaqueState     = "encoded_opaque_state"
	dpDraftTokens     = "draft_tokens"
	dpDisaggRequestID = "disagg_request_id"
	trtContextOnly    = "context_only"
	trtGenerationOnly = "generation_only"
	opaquePrefix      = "MOCKTRT1:"
)

// trtTopLevel is the OpenAI request model of trtllm-serve with
// extra="forbid": any other key is a 400.
var trtTopLevel = map[string]bool{
	"model": true, "prompt": true, "messages": true, "max_tokens": true, "max_completion_tokens": true,
	"min_tokens": true, "temperature": true, "top_p": true, "top_k": true, "n": true, "stream": true,
	"stream_options": true, "stop": true, "seed": true, "frequency_penalty": true, "presence_penalty": true,
	"logit_bias": true, "logprobs": true, "echo": true, "user": true, "best_of": true, "suffix": true,
	fieldDisaggParams: true, "cache_salt": true,
}

// trtResponsesTopLevel is trtllm-serve's ResponsesRequest (also
// extra="forbid"); its disaggregated server has no Responses route, so a
// generation server answers it standalone.
var trtResponsesTopLevel = map[string]bool{
	"model": true, "input": true, "instructions": true, "max_output_tokens": true, "temperature": true, "top_p": true,
	"stream": true, "store": true, "background": true, "previous_response_id": true, "tools": true, "tool_choice": true,
	"text": true, "reasoning": true, "user": true, "metadata": true,
}

var trtDisaggKeys = map[string]bool{
	dpRequestType: true, dpFirstGenTokens: true, dpCtxRequestID: true, dpOpaqueState: true,
	"opaque_state": true, dpDraftTokens: true, dpDisaggRequestID: true, "multimodal_embedding_handles": true,
}

// trtllm answers like trtllm-serve in a disaggregated deployment: a context
// server only accepts context_only, a generation server only
// generation_only with the opaque state its context produced.
func (x *exchange) trtllm() {
	allowed := trtTopLevel
	if x.responses() {
		allowed = trtResponsesTopLevel
	}
	for k := range x.req {
		if !allowed[k] {
			x.reject(http.StatusBadRequest, "extra_forbidden: "+k)
			return
		}
	}
	var dp map[string]json.RawMessage
	if raw, ok := x.req[fieldDisaggParams]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &dp); err != nil {
			x.reject(http.StatusBadRequest, "disaggregated_params must be an object")
			return
		}
		for k := range dp {
			if !trtDisaggKeys[k] {
				x.reject(http.StatusBadRequest, "extra_forbidden: disaggregated_params."+k)
				return
			}
		}
	}
	var rt string
	_ = json.Unmarshal(dp[dpRequestType], &rt)
	if x.e.cfg.Role == Prefill {
		if rt != trtContextOnly {
			x.reject(http.StatusBadRequest, "context server requires request_type context_only")
			return
		}
		if x.stream() {
			x.reject(http.StatusBadRequest, "context_only requests cannot stream")
			return
		}
		n := x.e.serveCount()
		var disaggID json.RawMessage = dp[dpDisaggRequestID]
		state, _ := json.Marshal(map[string]any{dpDisaggRequestID: disaggID, "ctx": n})
		x.e.mu.Lock()
		finish := x.e.finish
		x.e.mu.Unlock()
		text := ""
		if finish == "" {
			finish = "length"
		} else {
			text = " DONE."
		}
		x.answer(text, finish, nil, map[string]any{fieldDisaggParams: map[string]any{
			dpRequestType:    trtContextOnly,
			dpFirstGenTokens: []int{12345},
			dpCtxRequestID:   n,
			dpOpaqueState:    opaquePrefix + base64.StdEncoding.EncodeToString(state),
			dpDraftTokens:    nil,
		}})
		return
	}
	if dp == nil {
		x.answer(" Standalone fake TRT-LLM answer.", "stop", nil, nil)
		return
	}
	if rt != trtGenerationOnly {
		x.reject(http.StatusBadRequest, "generation server requires request_type generation_only")
		return
	}
	var opaque string
	_ = json.Unmarshal(dp[dpOpaqueState], &opaque)
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(opaque, opaquePrefix))
	var st map[string]json.RawMessage
	if !strings.HasPrefix(opaque, opaquePrefix) || err != nil || json.Unmarshal(raw, &st) != nil || st["ctx"] == nil || dp[dpCtxRequestID] == nil {
		x.reject(http.StatusBadRequest, "generation_only without a valid context opaque state")
		return
	}
	x.answer(" The fake TRT-LLM generation answer is 42.", "stop", nil, nil)
}
